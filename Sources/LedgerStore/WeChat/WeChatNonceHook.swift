import Crypto
import Foundation
import LedgerCore
internal import Postgres

/// Marks, in the append transaction, the plaintext nonce each WeChat push was admitted with
/// (`wechat_push_nonces.stored_position`, Migrations/0008): the nonce and the event commit together
/// or not at all. Marked after the commit instead, a failed mark left the nonce free to be claimed
/// by another body once its 30 s grace passed — a replay of the captured query string.
///
/// Essential: if the mark fails, the append fails (the push is answered 5xx and WeChat retries)
/// rather than store a push whose nonce stays free. It needs no facts, so it runs whether or not
/// the append recorded them. A push answered as a duplicate was stored earlier (under its first
/// nonce); the desk marks the new nonce then, before answering.
struct WeChatNonceHook: AppendHook {
    let name = "wechat_nonces"
    var needsFacts: Bool { false }
    var isEssential: Bool { true }

    func didAppend(_ batch: AppendedBatch, in connection: Connection) throws -> AfterCommit? {
        var nonces: [PostgresValue] = [], hashes: [PostgresValue] = [], positions: [PostgresValue] = []
        for e in batch.events where e.event.source == .wechat {
            guard let push = WeChatRawPush(raw: e.event.raw), let nonce = push.plaintextNonce else { continue }
            nonces.append(.text(nonce))
            hashes.append(.text(Hex.encode(Digest.sha256(push.body))))
            positions.append(.int64(e.position))
        }
        guard !nonces.isEmpty else { return nil }
        try connection.query(
            """
            UPDATE wechat_push_nonces n SET stored_position = v.position
            FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(nonce, body_sha256, position)
            WHERE n.nonce = v.nonce AND n.body_sha256 = v.body_sha256 AND n.stored_position IS NULL
            """, [.array(nonces, of: .text), .array(hashes, of: .text), .array(positions, of: .int8)], name: "mark plaintext nonces")
        return nil
    }
}
