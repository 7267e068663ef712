import Foundation

/// Facts of an App Store Server Notification V2 (the stored `payload`: the verified notification
/// with its nested JWS decoded as `transactionInfo`, `renewalInfo`, `appTransactionInfo`). The
/// snapshots' fields are read through `AppleFields` from the tree the verifier parsed
/// (`NewEvent.parsed`), so the payload is parsed once; a stored event is parsed once again.
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
/// | `data.status` (1–5) | `apple_status` (`detail.status`, `detail.source` = notification) | the notification's signedDate | signedAt |
/// | RESCIND_CONSENT (`appData`) | `consent_rescinded` (no subscription; `detail.appTransactionId`, bundleId, environment) | the notification's signedDate | signedAt |
/// | RENEWAL_EXTENSION/SUMMARY (`summary`) | `extension_summary` (no subscription; `detail`: requestIdentifier, productId, succeededCount, failedCount, storefrontCountryCodes, environment, bundleId) | the notification's signedDate | signedAt |
///
/// The subscription is (environment, originalTransactionId), environment from the transaction,
/// else `data.environment`, else the event's column. Notifications about no subscription (TEST,
/// EXTERNAL_PURCHASE_TOKEN) give no facts. appAccountToken is lowercased (`CustomerId`).
enum AppleV2Facts {
    static let revoking: Set<String> = ["REFUND", "REVOKE"]

    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        switch event.parsed {
        case .foundation(let tree)?: return try facts(of: event, payload: tree)
        case .value(let tree)?: return try facts(of: event, payload: tree)
        case nil:
            guard let tree = FoundationObject(json: event.payload) else {
                throw FactDecodingError("the payload is not a decoded V2 notification (not a JSON object)")
            }
            return try facts(of: event, payload: tree)
        }
    }

    static func facts<T: FieldTree>(of event: NewEvent, payload: T) throws(FactDecodingError) -> [Fact] {
        let type = payload.text("notificationType") ?? ""
        let message = payload.text("subtype").map { "\(type)/\($0)" } ?? type
        let data = payload.child("data")
        let txObject = payload.child("transactionInfo")
        let renewalObject = payload.child("renewalInfo")
        let notificationSignedOrNil = payload.millis("signedDate") ?? event.signedAt
        if type == "RESCIND_CONSENT" || (type == "RENEWAL_EXTENSION" && payload.child("summary") != nil) {
            guard let signed = notificationSignedOrNil else {
                throw FactDecodingError("the notification has no signedDate, so its facts cannot be ordered")
            }
            return try [statement(type: type, message: message, payload: payload, signed: signed, event: event)]
        }
        if txObject == nil, revoking.contains(type) || ["REFUND_REVERSED", "REFUND_DECLINED", "CONSUMPTION_REQUEST"].contains(type) {
            // About a transaction by definition: without one it says nothing the folds or refund
            // cases can use, but it is verified evidence — kept, visible, counted.
            throw FactDecodingError("\(type) carries no transaction (signedTransactionInfo), so it names nothing to refund or revoke")
        }
        if txObject == nil && renewalObject == nil { return [] }
        guard let notificationSigned = notificationSignedOrNil else {
            throw FactDecodingError("the notification has no signedDate, so its facts cannot be ordered")
        }
        let rawEnvironment = txObject?.text("environment") ?? renewalObject?.text("environment") ?? data?.text("environment")
            ?? event.environment
        guard let environment = SubscriptionKey.environment(rawEnvironment) else {
            throw FactDecodingError("environment \(rawEnvironment.map { "\"\($0)\"" } ?? "(none)") is neither Production nor Sandbox")
        }
        var facts: [Fact] = []
        var subject: (key: SubscriptionKey, transactionId: String?)?
        if let txObject {
            guard var snapshot = AppleFields.transaction(from: txObject) else {
                throw FactDecodingError("transactionInfo has no transactionId")
            }
            let id = snapshot.transactionId
            guard let original = snapshot.originalTransactionId, !original.isEmpty else {
                throw FactDecodingError("transactionInfo has no originalTransactionId")
            }
            if snapshot.bundleId == nil { snapshot.bundleId = data?.text("bundleId") }
            if snapshot.environment == nil { snapshot.environment = environment }
            let key = SubscriptionKey(environment: environment, originalTransactionId: original)
            subject = (key, id)
            let signed = snapshot.signedDate ?? notificationSigned
            facts.append(Fact(
                subscription: key, kind: .transaction, origin: .appleV2, message: message, signedAt: signed,
                effectiveAt: snapshot.purchaseDate ?? signed, transactionId: id,
                customerId: snapshot.appAccountToken, transaction: snapshot))
            if revoking.contains(type) {
                facts.append(Fact(
                    subscription: key, kind: .revocation, origin: .appleV2, message: message, signedAt: notificationSigned,
                    effectiveAt: snapshot.revocationDate ?? notificationSigned, transactionId: id,
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
                    detail: Detail.json(["reason": Detail.text(data?.text("consumptionRequestReason"))])))
            }
            if !revoking.contains(type), type != "REFUND_REVERSED" {
                // One rule with the App Store API answers (`AppleAPIFacts.transactionFacts`): every
                // signed transaction states whether it is revoked as of its signedDate, whatever the
                // notification type. A REFUND that was lost is healed by the next notification
                // carrying the transaction (Apple: "revocationDate — the date that the App Store
                // refunded the transaction or revoked it from Family Sharing", JWSTransactionDecodedPayload);
                // without one, a reversal signed then undoes only revocations signed earlier, so a
                // late-delivered older snapshot never undoes a newer refund.
                if let revoked = snapshot.revocationDate {
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
        if let renewalObject {
            guard let original = renewalObject.text("originalTransactionId") ?? txObject?.text("originalTransactionId"),
                  !original.isEmpty else {
                throw FactDecodingError("renewalInfo has no originalTransactionId")
            }
            let fields = AppleFields.renewal(from: renewalObject)
            let signed = fields.signedDate ?? notificationSigned
            let key = SubscriptionKey(environment: environment, originalTransactionId: original)
            if subject == nil { subject = (key, nil) }
            facts.append(Fact(
                subscription: key, kind: .renewal, origin: .appleV2, message: message, signedAt: signed,
                customerId: fields.appAccountToken, renewal: fields))
        }
        if let status = data?.integer("status"), AppleStatusFacts.documented.contains(status), let subject {
            // "The status of an auto-renewable subscription as of the signedDate in the
            // responseBodyV2DecodedPayload" (App Store Server Notifications, data.status).
            facts.append(AppleStatusFacts.statement(
                status, key: subject.key, transactionId: subject.transactionId, origin: .appleV2, message: message,
                signedAt: notificationSigned, source: .notification))
        }
        return facts
    }

    /// RESCIND_CONSENT and RENEWAL_EXTENSION/SUMMARY: statements about no one subscription.
    static func statement<T: FieldTree>(type: String, message: String, payload: T, signed: EpochMillis,
                                        event: NewEvent) throws(FactDecodingError) -> Fact {
        if type == "RESCIND_CONSENT" {
            // appData (App Store Server Notifications 2.19): the app transaction names the customer's
            // app download (appTransactionId), the same id their transactions and renewal info carry.
            let app = payload.child("appData"), info = payload.child("appTransactionInfo")
            guard let appTransactionId = info?.text("appTransactionId"), !appTransactionId.isEmpty else {
                throw FactDecodingError("RESCIND_CONSENT carries no appTransactionId (appData.signedAppTransactionInfo), so it names no customer")
            }
            let environment = SubscriptionKey.environment(info?.text("receiptType") ?? app?.text("environment") ?? event.environment)
            return Fact(
                subscription: nil, kind: .consentRescinded, origin: .appleV2, message: message, signedAt: signed,
                detail: Detail.json([
                    "appTransactionId": .string(appTransactionId), "bundleId": Detail.text(app?.text("bundleId")),
                    "environment": Detail.text(environment),
                ]))
        }
        let summary = payload.child("summary")
        guard let request = summary?.text("requestIdentifier"), !request.isEmpty else {
            throw FactDecodingError("RENEWAL_EXTENSION/SUMMARY carries no summary.requestIdentifier")
        }
        return Fact(
            subscription: nil, kind: .extensionSummary, origin: .appleV2, message: message, signedAt: signed,
            detail: Detail.json([
                "requestIdentifier": .string(request), "productId": Detail.text(summary?.text("productId")),
                "succeededCount": Detail.int(summary?.integer("succeededCount")),
                "failedCount": Detail.int(summary?.integer("failedCount")),
                "storefrontCountryCodes": summary.flatMap { s in
                    let codes = s.texts("storefrontCountryCodes")
                    return codes.isEmpty ? nil : .array(codes.map(JSONValue.string))
                },
                "environment": Detail.text(SubscriptionKey.environment(summary?.text("environment") ?? event.environment)),
                "bundleId": Detail.text(summary?.text("bundleId")),
            ]))
    }
}

/// Apple's stated status as a fact (`FactKind.appleStatus`), from a notification or an API answer.
public enum AppleStatusFacts {
    public enum Source: String, Sendable { case notification, api }

    /// The statuses Apple documents (1 active … 5 revoked); another value (one Apple adds later)
    /// is not compared with anything: it stays in the stored payload only.
    public static let documented: ClosedRange<Int64> = 1...5

    static func statement(_ status: Int64, key: SubscriptionKey, transactionId: String?, origin: FactOrigin, message: String,
                          signedAt: EpochMillis, source: Source) -> Fact {
        Fact(subscription: key, kind: .appleStatus, origin: origin, message: message, signedAt: signedAt,
             transactionId: transactionId,
             detail: Detail.json(["status": .integer(status), "source": .string(source.rawValue)]))
    }
}
