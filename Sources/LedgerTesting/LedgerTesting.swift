// LedgerTesting: filled in by its issue.
