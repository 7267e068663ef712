// LedgerService: filled in by its issue.
