// AppStore: filled in by its issue.
