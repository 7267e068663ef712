import Foundation
print("ledger: not yet")
