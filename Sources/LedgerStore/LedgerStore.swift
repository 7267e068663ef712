// LedgerStore: filled in by its issue.
