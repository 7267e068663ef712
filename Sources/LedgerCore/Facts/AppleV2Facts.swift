import Foundation

/// Facts of an App Store Server Notification V2 (the stored `payload`: the verified notification
/// with its nested JWS decoded as `transactionInfo`, `renewalInfo`, `appTransactionInfo`).
///
/// | payload | fact | signedAt | effectiveAt |
/// |---|---|---|---|
/// | `transactionInfo` | `transaction` (the snapshot) | the transaction's signedDate, else the notification's | purchaseDate |
/// | `renewalInfo` | `renewal` (the snapshot, absent fields cleared) | the renewal info's signedDate, else the notification's | signedAt |
/// | REFUND, REVOKE | `revocation` of `transactionInfo.transactionId` | the notification's signedDate | revocationDate, else signedAt |
/// | REFUND_REVERSED | `reversal` of that transaction | the notification's signedDate | signedAt |
/// | any other type, `transactionInfo` with `revocationDate` | `revocation` (`detail.basis`) | the transaction's signedDate | revocationDate |
/// | any other type, `transactionInfo` without one | `reversal` (`detail.basis`): not revoked as of signing | the transaction's signedDate | signedAt |
/// | REFUND_DECLINED | `refund_declined` (evidence) | the notification's signedDate | signedAt |
/// | CONSUMPTION_REQUEST | `consumption_request` (evidence, `detail.reason`) | the notification's signedDate | signedAt |
///
/// The subscription is (environment, originalTransactionId), environment from the transaction,
/// else `data.environment`, else the event's column. Notifications about no subscription (TEST,
/// RENEWAL_EXTENSION/SUMMARY, EXTERNAL_PURCHASE_TOKEN, RESCIND_CONSENT) give no facts.
/// appAccountToken is lowercased (`CustomerId`).
enum AppleV2Facts {
    static let revoking: Set<String> = ["REFUND", "REVOKE"]

    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let payload: AppleEventPayload
        do { payload = try JSONDecoder().decode(AppleEventPayload.self, from: event.payload) } catch {
            throw FactDecodingError("the payload is not a decoded V2 notification: \(error)")
        }
        let type = payload.notificationType ?? ""
        let message = payload.subtype.map { "\(type)/\($0)" } ?? type
        let tx = payload.transactionInfo
        let renewal = payload.renewalInfo
        if tx == nil, revoking.contains(type) || ["REFUND_REVERSED", "REFUND_DECLINED", "CONSUMPTION_REQUEST"].contains(type) {
            // About a transaction by definition: without one it says nothing the folds or refund
            // cases can use, but it is verified evidence — kept, visible, counted.
            throw FactDecodingError("\(type) carries no transaction (signedTransactionInfo), so it names nothing to refund or revoke")
        }
        if tx == nil && renewal == nil { return [] }
        guard let notificationSigned = payload.signedDate?.millis ?? event.signedAt else {
            throw FactDecodingError("the notification has no signedDate, so its facts cannot be ordered")
        }
        let rawEnvironment = tx?.environment ?? renewal?.environment ?? payload.data?.environment ?? event.environment
        guard let environment = SubscriptionKey.environment(rawEnvironment) else {
            throw FactDecodingError("environment \(rawEnvironment.map { "\"\($0)\"" } ?? "(none)") is neither Production nor Sandbox")
        }
        var facts: [Fact] = []
        if let tx {
            guard let id = tx.transactionId, !id.isEmpty else { throw FactDecodingError("transactionInfo has no transactionId") }
            guard let original = tx.originalTransactionId, !original.isEmpty else {
                throw FactDecodingError("transactionInfo has no originalTransactionId")
            }
            guard var snapshot = TransactionFact(tx) else { throw FactDecodingError("transactionInfo has no transactionId") }
            if snapshot.bundleId == nil { snapshot.bundleId = payload.data?.bundleId }
            if snapshot.environment == nil { snapshot.environment = environment }
            let key = SubscriptionKey(environment: environment, originalTransactionId: original)
            let signed = tx.signedDate?.millis ?? notificationSigned
            facts.append(Fact(
                subscription: key, kind: .transaction, origin: .appleV2, message: message, signedAt: signed,
                effectiveAt: tx.purchaseDate?.millis ?? signed, transactionId: id,
                customerId: snapshot.appAccountToken, transaction: snapshot))
            if revoking.contains(type) {
                facts.append(Fact(
                    subscription: key, kind: .revocation, origin: .appleV2, message: message, signedAt: notificationSigned,
                    effectiveAt: tx.revocationDate?.millis ?? notificationSigned, transactionId: id,
                    customerId: snapshot.appAccountToken, transaction: snapshot))
            }
            let evidence: FactKind? = switch type {
            case "REFUND_REVERSED": .reversal
            case "REFUND_DECLINED": .refundDeclined
            case "CONSUMPTION_REQUEST": .consumptionRequest
            default: nil
            }
            if let evidence {
                facts.append(Fact(
                    subscription: key, kind: evidence, origin: .appleV2, message: message, signedAt: notificationSigned,
                    transactionId: id, customerId: snapshot.appAccountToken, transaction: snapshot,
                    detail: Detail.json(["reason": Detail.text(payload.data?.consumptionRequestReason)])))
            }
            if !revoking.contains(type), type != "REFUND_REVERSED" {
                // One rule with the App Store API answers (`AppleAPIFacts.transactionFacts`): every
                // signed transaction states whether it is revoked as of its signedDate, whatever the
                // notification type. A REFUND that was lost is healed by the next notification
                // carrying the transaction (Apple: "revocationDate — the date that the App Store
                // refunded the transaction or revoked it from Family Sharing", JWSTransactionDecodedPayload);
                // without one, a reversal signed then undoes only revocations signed earlier, so a
                // late-delivered older snapshot never undoes a newer refund.
                if let revoked = tx.revocationDate?.millis {
                    facts.append(Fact(
                        subscription: key, kind: .revocation, origin: .appleV2, message: message, signedAt: signed,
                        effectiveAt: revoked, transactionId: id, customerId: snapshot.appAccountToken, transaction: snapshot,
                        detail: Detail.json(["basis": .string("snapshot with revocationDate")])))
                } else {
                    facts.append(Fact(
                        subscription: key, kind: .reversal, origin: .appleV2, message: message, signedAt: signed,
                        effectiveAt: signed, transactionId: id, customerId: snapshot.appAccountToken, transaction: snapshot,
                        detail: Detail.json(["basis": .string("snapshot without revocationDate")])))
                }
            }
        }
        if let renewal {
            guard let original = renewal.originalTransactionId ?? tx?.originalTransactionId, !original.isEmpty else {
                throw FactDecodingError("renewalInfo has no originalTransactionId")
            }
            let signed = renewal.signedDate?.millis ?? notificationSigned
            let fields = RenewalFact(renewal)
            facts.append(Fact(
                subscription: SubscriptionKey(environment: environment, originalTransactionId: original),
                kind: .renewal, origin: .appleV2, message: message, signedAt: signed,
                customerId: fields.appAccountToken, renewal: fields))
        }
        return facts
    }
}
