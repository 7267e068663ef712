internal import CMicroHTTPD
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// libmicrohttpd calls these on its own threads: they are nonisolated global functions that reach
// Swift state only through the `cls` / `con_cls` pointers.

/// Bytes of an oversized body read and thrown away before the connection is simply closed, so a
/// client that ignores the 413 cannot keep a connection busy forever.
private let drainAllowance = 4 << 20

func mhdAccessHandler(
    cls: UnsafeMutableRawPointer?,
    connection: OpaquePointer?,
    url: UnsafePointer<CChar>?,
    method: UnsafePointer<CChar>?,
    version: UnsafePointer<CChar>?,
    uploadData: UnsafePointer<CChar>?,
    uploadDataSize: UnsafeMutablePointer<Int>?,
    conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let uploadDataSize, let conCls else { return .NO }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()

    let existing = conCls.pointee
    if existing == nil || existing == hostilePathMarker {
        let state = core.begin(
            connection, url: url.map { String(cString: $0) } ?? "/", method: method.map { String(cString: $0) } ?? ""
        )
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        if existing == hostilePathMarker {
            return core.queue(.error(
                status: 400, code: "invalid_path",
                message: "The request path contains an encoded NUL byte (%00); remove it."
            ), for: state, on: connection)
        }
        // RFC 9112 §3.2.4 / §6.1: whitespace before a header's colon, or a length given both by
        // Transfer-Encoding and Content-Length, may be read differently by a proxy in front;
        // refuse, and close the connection so nothing behind it is read as a next request.
        if let ambiguity = framingAmbiguity(connection) {
            var refusal = HTTPResponse.error(status: 400, code: "ambiguous_framing", message: ambiguity)
            refusal.headers.append(("Connection", "close"))
            return core.queue(refusal, for: state, on: connection)
        }
        // Refuse a declared oversized body before reading it (and before any 100 Continue).
        if let declared = contentLength(connection), declared > UInt64(core.configuration.maxBodyBytes) {
            state.overLimit = true
            return core.queue(core.tooLarge(), for: state, on: connection)
        }
        return .YES
    }
    guard let existing else { return .NO }
    let state = Unmanaged<RequestState>.fromOpaque(existing).takeUnretainedValue()

    let size = uploadDataSize.pointee
    if size > 0 {
        uploadDataSize.pointee = 0
        if state.overLimit || state.isAnswered {
            state.discardedBytes += size
            return state.discardedBytes > drainAllowance ? .NO : .YES
        }
        if state.body.count + size > core.configuration.maxBodyBytes {
            // Chunked bodies have no length up front: stop buffering the moment the limit is
            // crossed. libmicrohttpd 0.9.75 refuses a response queued mid-body (tried: MHD_NO), so
            // the 413 goes out once the rest is drained, up to `drainAllowance`.
            state.overLimit = true
            state.discardedBytes = state.body.count + size
            state.body = Data()
            return .YES
        }
        if let uploadData {
            if state.body.isEmpty, let declared = contentLength(connection) {
                state.body.reserveCapacity(Int(declared))
            }
            state.body.append(UnsafeRawPointer(uploadData).assumingMemoryBound(to: UInt8.self), count: size)
        }
        return .YES
    }
    return core.requestReceived(state, connection)
}

func mhdRequestCompleted(
    cls: UnsafeMutableRawPointer?,
    connection: OpaquePointer?,
    conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    toe: MHD_RequestTerminationCode
) {
    guard let cls, let conCls, let existing = conCls.pointee else { return }
    conCls.pointee = nil
    guard existing != hostilePathMarker else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    if let connection { core.receiveDeadline?.answered(connection) }
    let state = Unmanaged<RequestState>.fromOpaque(existing).takeRetainedValue()
    core.completed(state)
}

/// Returned by the URI callback (it becomes the request's first `con_cls`) when the raw path holds
/// `%00`: libmicrohttpd decodes the path into a C string, so the NUL would silently cut it short
/// and `/v1/subscriptions/1%00/events` would reach the handler as `/v1/subscriptions/1`. A tag
/// rather than an allocation, because a request the daemon rejects later never reaches the
/// completion callback that would free it.
nonisolated(unsafe) let hostilePathMarker = UnsafeMutableRawPointer(bitPattern: 1)

func mhdURIReceived(
    cls: UnsafeMutableRawPointer?, uri: UnsafePointer<CChar>?, connection: OpaquePointer?
) -> UnsafeMutableRawPointer? {
    guard let uri else { return nil }
    var pointer = uri
    // Only the path: query values are read with their lengths, so a NUL there is kept intact.
    while pointer.pointee != 0, pointer.pointee != 0x3F {
        if pointer.pointee == 0x25, pointer[1] == 0x30, pointer[2] == 0x30 { return hostilePathMarker }
        pointer += 1
    }
    return nil
}

private func contentLength(_ connection: OpaquePointer) -> UInt64? {
    guard let value = MHD_lookup_connection_value(connection, .HEADER_KIND, "Content-Length") else { return nil }
    return UInt64(String(cString: value))
}

/// Why the request's framing is ambiguous, or nil. libmicrohttpd 0.9.75 accepts both cases even
/// with `MHD_OPTION_STRICT_FOR_CLIENT` 1 (its whitespace check runs only at level -1, which would
/// also relax the rest), so the access callback checks the parsed header names.
private func framingAmbiguity(_ connection: OpaquePointer) -> String? {
    var transferEncoding = false
    var lengths: Set<String> = []
    for (name, value) in pairs(connection, kind: .HEADER_KIND) {
        if name.utf8.contains(where: { $0 == 0x20 || $0 == 0x09 }) {
            return "A header name contains whitespace (before its colon); remove it, HTTP/1.1 forbids it."
        }
        switch name.lowercased() {
        case "transfer-encoding": transferEncoding = true
        // RFC 9112 §6.3: several Content-Length values (in fields or one list) that differ make
        // the length unknowable; a proxy may have read another one.
        case "content-length": for v in value.split(separator: ",", omittingEmptySubsequences: false) { lengths.insert(v.trimmingCharacters(in: .whitespaces)) }
        default: break
        }
    }
    if transferEncoding && !lengths.isEmpty {
        return "The request has both Transfer-Encoding and Content-Length; send only one of them."
    }
    if lengths.count > 1 {
        return "The request has Content-Length values that differ; send exactly one."
    }
    return nil
}

/// Collects key/value pairs of one kind; passed to the C iterator through its `cls`.
private final class PairCollector {
    var pairs: [(name: String, value: String)] = []
}

private func pairs(_ connection: OpaquePointer, kind: MHD_ValueKind) -> [(name: String, value: String)] {
    let collector = PairCollector()
    _ = withExtendedLifetime(collector) {
        MHD_get_connection_values_n(connection, kind, { cls, _, key, keySize, value, valueSize in
            guard let cls else { return .NO }
            let collector = Unmanaged<PairCollector>.fromOpaque(cls).takeUnretainedValue()
            collector.pairs.append((text(key, keySize), text(value, valueSize)))
            return .YES
        }, Unmanaged.passUnretained(collector).toOpaque())
    }
    return collector.pairs
}

/// Sized decoding: values may legally contain bytes a C string would cut short.
private func text(_ pointer: UnsafePointer<CChar>?, _ count: Int) -> String {
    guard let pointer, count > 0 else { return "" }
    return String(decoding: UnsafeRawBufferPointer(start: pointer, count: count), as: UTF8.self)
}

func requestHeaders(_ connection: OpaquePointer) -> HTTPHeaders {
    HTTPHeaders(pairs(connection, kind: .HEADER_KIND))
}

func queryArguments(_ connection: OpaquePointer) -> [String: String] {
    var query: [String: String] = [:]
    for (name, value) in pairs(connection, kind: .GET_ARGUMENT_KIND) where query[name] == nil {
        query[name] = value
    }
    return query
}

func clientAddress(_ connection: OpaquePointer) -> String? {
    guard let address = cmhd_connection_client_address(connection) else { return nil }
    return SocketAddress.describe(address)
}
