/// AppStore owns Apple's side of the ledger: verifying App Store signed data (JWS + x5c),
/// turning V2 and legacy V1 notifications into `NewEvent`s, and offline inspection of stored
/// evidence. Entry points: `SignedDataVerifier`, `AppleNotificationIngestor`, `PayloadInspector`.
import Foundation
