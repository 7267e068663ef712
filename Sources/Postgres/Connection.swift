internal import CLibPQ
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One libpq connection. Not thread-safe (a PGconn is not): use it from one thread at a time.
/// `@unchecked Sendable` so a `ConnectionPool` can hand it from the thread that opened it to the
/// borrower's thread; the pool guarantees exactly one borrower at a time.
public final class Connection: @unchecked Sendable {
    let handle: OpaquePointer
    private var savepointCounter = 0
    /// Set by `makeCanceller()`: every statement checks it before it is sent.
    var canceller: StatementCanceller?

    /// Opens a connection from a keyword/value conninfo (`host=… dbname=…`) or a
    /// `postgresql://` URL; both are what `PQconnectdb` accepts.
    public init(conninfo: String) throws(PostgresError) {
        guard let handle = PQconnectdb(conninfo) else {
            throw PostgresError(.unavailable, "libpq could not allocate a connection")
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = Connection.errorText(handle)
            PQfinish(handle)
            throw PostgresError(.unavailable, message)
        }
        // libpq prints NOTICEs (e.g. "relation already exists, skipping") to stderr by default,
        // which would interleave with the service's structured log; they carry nothing we act on.
        PQsetNoticeReceiver(handle, { _, _ in }, nil)
        self.handle = handle
    }

    deinit { PQfinish(handle) }

    /// True once libpq knows the connection is unusable; the pool then discards it.
    public var isBroken: Bool { PQstatus(handle) != CONNECTION_OK }

    /// True while a transaction block is open (or aborted and awaiting ROLLBACK).
    public var inTransaction: Bool {
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// The backend's process id (for `pg_terminate_backend` in tests and diagnostics).
    public var backendPID: Int32 { PQbackendPID(handle) }

    // MARK: statements

    /// Runs one statement with its parameters sent out of band (`$1`, `$2`, …), never pasted into
    /// the SQL. Results come back in binary and decode through `Row.decode`.
    /// - Parameter name: names the statement in errors and logs; defaults to the start of the SQL.
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = [], name: String? = nil) throws(PostgresError) -> QueryResult {
        let label = name ?? Connection.label(sql)
        try refuseIfCancelled(label)
        let result = try withEncoded(parameters, statement: label) { types, values, lengths, formats in
            PQexecParams(handle, sql, Int32(parameters.count), types, values, lengths, formats, 1)
        }
        return try check(result, statement: label)
    }

    /// `query` through a statement prepared on this connection the first time it runs (PQprepare,
    /// then PQexecPrepared): the server parses and plans a hot statement once per connection
    /// instead of on every call (for a one-row indexed read that is most of its server time). Only
    /// for SQL fixed in the source: each distinct text (and parameter types) holds a prepared
    /// statement for the connection's life. A statement whose tables are replaced (a rebuild's
    /// swap) is re-analysed by the server on its next run.
    @discardableResult
    public func queryPrepared(_ sql: String, _ parameters: [PostgresValue] = [], name: String? = nil) throws(PostgresError) -> QueryResult {
        let label = name ?? Connection.label(sql)
        try refuseIfCancelled(label)
        let key = PreparedKey(sql: sql, types: parameters.map(\.type.oid))
        let statement: String
        if let known = prepared[key] {
            statement = known
        } else {
            statement = "ledger_p\(prepared.count + 1)"
            let result = PQprepare(handle, statement, sql, Int32(parameters.count), key.types)
            _ = try check(result, statement: label)
            prepared[key] = statement
        }
        let result = try withEncoded(parameters, statement: label) { _, values, lengths, formats in
            PQexecPrepared(handle, statement, Int32(parameters.count), values, lengths, formats, 1)
        }
        return try check(result, statement: label)
    }

    private struct PreparedKey: Hashable {
        var sql: String
        var types: [UInt32]
    }

    /// Statements prepared on this connection, by text and parameter types.
    private var prepared: [PreparedKey: String] = [:]

    /// Encodes `parameters` in binary, out of band, and hands libpq's four arrays to `run`.
    private func withEncoded(
        _ parameters: [PostgresValue], statement label: String,
        _ run: ([UInt32], [UnsafePointer<CChar>?], [Int32], [Int32]) -> OpaquePointer?
    ) throws(PostgresError) -> OpaquePointer? {
        guard parameters.count <= Int(UInt16.max) else {
            throw PostgresError(.invalidArgument, "\(parameters.count) parameters exceed PostgreSQL's limit of 65535; send arrays instead", statement: label)
        }
        var buffer: [UInt8] = []
        var offsets: [Int] = []
        var lengths: [Int32] = []
        var types: [UInt32] = []
        offsets.reserveCapacity(parameters.count)
        for parameter in parameters {
            types.append(parameter.type.oid)
            if parameter == .null {
                offsets.append(-1)
                lengths.append(0)
                continue
            }
            let start = buffer.count
            do { try parameter.encode(into: &buffer) } catch var error {
                error.statement = label
                throw error
            }
            guard buffer.count - start <= Int(Int32.max) else {
                throw PostgresError(.invalidArgument, "parameter \(offsets.count + 1) is larger than 2 GiB", statement: label)
            }
            offsets.append(start)
            lengths.append(Int32(buffer.count - start))
        }
        // A zero-length non-NULL value still needs a non-nil pointer.
        buffer.append(0)
        let formats = [Int32](repeating: 1, count: parameters.count)
        return buffer.withUnsafeBufferPointer { base in
            let values: [UnsafePointer<CChar>?] = offsets.map { offset in
                offset < 0 ? nil : UnsafeRawPointer(base.baseAddress! + offset).assumingMemoryBound(to: CChar.self)
            }
            return run(types, values, lengths, formats)
        }
    }

    /// Runs a script of several statements (a migration file) with the simple query protocol.
    /// It takes no parameters by design: only trusted SQL text from files belongs here.
    public func execute(script sql: String, name: String) throws(PostgresError) {
        try refuseIfCancelled(name)
        let result = PQexec(handle, sql)
        _ = try check(result, statement: name)
    }

    func check(_ result: OpaquePointer?, statement: String) throws(PostgresError) -> QueryResult {
        guard let result else {
            throw failure(statement: statement)
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return QueryResult(result: result, statement: statement)
        default:
            let error = Connection.error(from: result, connection: handle, statement: statement)
            PQclear(result)
            throw error
        }
    }

    func failure(statement: String) -> PostgresError {
        let kind: PostgresError.Kind = isBroken ? .connectionLost : .server
        return PostgresError(kind, Connection.errorText(handle), statement: statement)
    }

    static func error(from result: OpaquePointer, connection: OpaquePointer, statement: String) -> PostgresError {
        func field(_ code: UInt8) -> String? {
            guard let pointer = PQresultErrorField(result, Int32(code)) else { return nil }
            return String(cString: pointer)
        }
        let sqlState = field(UInt8(ascii: "C"))
        var message = field(UInt8(ascii: "M")) ?? String(cString: PQresultErrorMessage(result))
        if message.isEmpty { message = errorText(connection) }
        let broken = PQstatus(connection) != CONNECTION_OK
        let kind: PostgresError.Kind = broken || (sqlState.map(PostgresError.isConnectionState) ?? false) ? .connectionLost : .server
        return PostgresError(
            kind, message.trimmingCharacters(in: .whitespacesAndNewlines), sqlState: sqlState,
            detail: field(UInt8(ascii: "D")), hint: field(UInt8(ascii: "H")), statement: statement)
    }

    static func errorText(_ handle: OpaquePointer) -> String {
        guard let pointer = PQerrorMessage(handle) else { return "unknown libpq error" }
        let text = String(cString: pointer).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? "unknown libpq error" : text
    }

    static func label(_ sql: String) -> String {
        let flat = sql.split(whereSeparator: { $0 == "\n" || $0 == "\t" || $0 == " " }).joined(separator: " ")
        return flat.count > 60 ? String(flat.prefix(60)) + "…" : flat
    }

    // MARK: transactions

    /// Runs `body` in a transaction: COMMIT when it returns, ROLLBACK when it throws (the error is
    /// rethrown). A body that swallowed a statement error leaves the transaction aborted; the
    /// COMMIT then rolls back, and this reports it instead of pretending the work landed.
    @discardableResult
    public func transaction<T>(_ body: (Connection) throws -> T) throws -> T {
        try query("BEGIN", name: "BEGIN")
        let value: T
        do {
            value = try body(self)
        } catch {
            if !isBroken { _ = try? query("ROLLBACK", name: "ROLLBACK") }
            throw error
        }
        let commit = try query("COMMIT", name: "COMMIT")
        if String(cString: PQcmdStatus(commit.result)) == "ROLLBACK" {
            throw PostgresError(.server, "the transaction was rolled back because a statement in it failed and the error was caught; let the error propagate or use a savepoint", sqlState: "25P02", statement: "COMMIT")
        }
        return value
    }

    /// Runs `body` inside a SAVEPOINT of the current transaction: on error only its work is undone
    /// and the transaction stays usable; the error is rethrown.
    @discardableResult
    public func savepoint<T>(_ body: (Connection) throws -> T) throws -> T {
        savepointCounter += 1
        // Generated, never caller-supplied, so safe to put in the SQL text.
        let name = "ledger_sp_\(savepointCounter)"
        try query("SAVEPOINT \(name)", name: "SAVEPOINT")
        do {
            let value = try body(self)
            try query("RELEASE SAVEPOINT \(name)", name: "RELEASE SAVEPOINT")
            return value
        } catch {
            if !isBroken {
                _ = try? query("ROLLBACK TO SAVEPOINT \(name)", name: "ROLLBACK TO SAVEPOINT")
                _ = try? query("RELEASE SAVEPOINT \(name)", name: "RELEASE SAVEPOINT")
            }
            throw error
        }
    }

    /// Quotes an identifier (database, table or role name) for the rare statements that cannot
    /// take it as a parameter (`CREATE DATABASE`, `LISTEN`).
    public func quoteIdentifier(_ identifier: String) throws(PostgresError) -> String {
        guard !identifier.utf8.contains(0) else {
            throw PostgresError(.invalidArgument, "identifiers cannot contain NUL")
        }
        let utf8 = Array(identifier.utf8)
        guard let quoted = PQescapeIdentifier(handle, identifier, utf8.count) else {
            throw PostgresError(.invalidArgument, "cannot quote identifier: \(Connection.errorText(handle))")
        }
        defer { PQfreemem(quoted) }
        return String(cString: quoted)
    }

    // MARK: liveness

    /// Cheap check before reuse: an idle connection whose socket is readable has been sent
    /// something unasked — after a server restart that is the termination notice and EOF — so read
    /// it and see whether the connection survived. Costs no round trip.
    public func isAliveWhenIdle() -> Bool {
        if isBroken { return false }
        let socket = PQsocket(handle)
        guard socket >= 0 else { return false }
        // The termination notice and the EOF may arrive in separate reads; EOF stays readable,
        // so keep consuming until the socket is quiet or libpq declares the connection dead.
        for _ in 0..<8 {
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 0)
            if ready < 0 { return false }
            if ready == 0 { return !isBroken }
            if descriptor.revents & Int16(POLLHUP | POLLERR) != 0 { return false }
            if PQconsumeInput(handle) == 0 || isBroken { return false }
        }
        // Still readable after several reads while idle: nothing legitimate streams that much.
        return false
    }

    // MARK: LISTEN / NOTIFY

    /// Notifications already received on this connection.
    public func pendingNotifications() -> [PostgresNotification] {
        var out: [PostgresNotification] = []
        while let notify = PQnotifies(handle) {
            out.append(PostgresNotification(
                channel: String(cString: notify.pointee.relname),
                payload: String(cString: notify.pointee.extra),
                backendPID: notify.pointee.be_pid))
            PQfreemem(notify)
        }
        return out
    }

    /// Blocks up to `timeout` until at least one notification arrives (or returns empty).
    public func waitForNotifications(timeout: Duration) throws(PostgresError) -> [PostgresNotification] {
        var pending = pendingNotifications()
        if !pending.isEmpty { return pending }
        let socket = PQsocket(handle)
        guard socket >= 0 else { throw PostgresError(.connectionLost, Connection.errorText(handle), statement: "LISTEN") }
        let deadline = ContinuousClock.now + timeout
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return [] }
            let (seconds, attos) = remaining.components
            let millis = Int32(clamping: seconds * 1000 + attos / 1_000_000_000_000_000 + 1)
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, millis)
            if ready < 0 {
                if errno == EINTR { continue }
                throw PostgresError(.connectionLost, "poll failed (errno \(errno))", statement: "LISTEN")
            }
            if ready == 0 { continue }
            if PQconsumeInput(handle) == 0 || isBroken {
                throw PostgresError(.connectionLost, Connection.errorText(handle), statement: "LISTEN")
            }
            pending = pendingNotifications()
            if !pending.isEmpty { return pending }
        }
    }

    // MARK: COPY

    /// Streams rows into `COPY … FROM STDIN`: `produce` calls `write` with data in the COPY's
    /// format. If `produce` throws, the COPY is aborted (nothing is inserted) and the error rethrown.
    /// Returns the number of rows copied.
    @discardableResult
    public func copyIn(_ sql: String, _ produce: (CopyInWriter) throws -> Void) throws -> Int {
        let label = Connection.label(sql)
        try refuseIfCancelled(label)
        guard let start = PQexec(handle, sql) else { throw failure(statement: label) }
        guard PQresultStatus(start) == PGRES_COPY_IN else {
            defer { PQclear(start) }
            if PQresultStatus(start) == PGRES_FATAL_ERROR {
                throw Connection.error(from: start, connection: handle, statement: label)
            }
            throw PostgresError(.copy, "the statement is not COPY … FROM STDIN", statement: label)
        }
        PQclear(start)
        let writer = CopyInWriter(connection: self, statement: label)
        var producerError: (any Error)?
        do { try produce(writer) } catch { producerError = error }
        let endStatus = PQputCopyEnd(handle, producerError == nil ? nil : "aborted by the client")
        if endStatus != 1 { throw failure(statement: label) }
        let (rows, serverError) = copyResults(statement: label)
        if let producerError { throw producerError }
        if let serverError { throw serverError }
        return rows
    }

    /// Streams the output of `COPY … TO STDOUT`, one row (text/CSV) or chunk (binary) per call.
    /// Returns the number of rows.
    @discardableResult
    public func copyOut(_ sql: String, _ consume: (Data) throws -> Void) throws -> Int {
        let label = Connection.label(sql)
        try refuseIfCancelled(label)
        guard let start = PQexec(handle, sql) else { throw failure(statement: label) }
        guard PQresultStatus(start) == PGRES_COPY_OUT else {
            defer { PQclear(start) }
            if PQresultStatus(start) == PGRES_FATAL_ERROR {
                throw Connection.error(from: start, connection: handle, statement: label)
            }
            throw PostgresError(.copy, "the statement is not COPY … TO STDOUT", statement: label)
        }
        PQclear(start)
        var consumerError: (any Error)?
        while true {
            var buffer: UnsafeMutablePointer<CChar>?
            let count = PQgetCopyData(handle, &buffer, 0)
            if count > 0, let buffer {
                // Keep draining after a consumer error: the protocol has no way to stop a COPY
                // OUT early short of cancelling, and the connection must end up idle.
                if consumerError == nil {
                    do { try consume(Data(bytes: buffer, count: Int(count))) } catch { consumerError = error }
                }
                PQfreemem(buffer)
            } else if count == -1 {
                break
            } else {
                throw failure(statement: label)
            }
        }
        let (rows, serverError) = copyResults(statement: label)
        if let consumerError { throw consumerError }
        if let serverError { throw serverError }
        return rows
    }
}

extension Connection {
    /// Drains the results that end a COPY (both directions): the row count of its COMMAND_OK and
    /// the first error the server reported, so the connection is left idle either way.
    fileprivate func copyResults(statement label: String) -> (rows: Int, error: PostgresError?) {
        var rows = 0
        var serverError: PostgresError?
        while let result = PQgetResult(handle) {
            if PQresultStatus(result) == PGRES_COMMAND_OK {
                rows = Int(String(cString: PQcmdTuples(result))) ?? 0
            } else if serverError == nil {
                serverError = Connection.error(from: result, connection: handle, statement: label)
            }
            PQclear(result)
        }
        return (rows, serverError)
    }
}

/// Writes COPY data during `Connection.copyIn`.
public struct CopyInWriter {
    let connection: Connection
    let statement: String

    public func write(_ data: some DataProtocol) throws(PostgresError) {
        let bytes = Array(data)
        var offset = 0
        // PQputCopyData takes an int length; split anything larger.
        while offset < bytes.count || bytes.isEmpty {
            let chunk = min(bytes.count - offset, 1 << 30)
            let status = bytes.withUnsafeBufferPointer { base in
                base.baseAddress.map { pointer in
                    UnsafeRawPointer(pointer + offset).withMemoryRebound(to: CChar.self, capacity: max(chunk, 1)) {
                        PQputCopyData(connection.handle, $0, Int32(chunk))
                    }
                } ?? 1
            }
            if status != 1 { throw connection.failure(statement: statement) }
            offset += chunk
            if bytes.isEmpty { break }
        }
    }

    public func write(_ text: String) throws(PostgresError) { try write(Array(text.utf8)) }
}

/// A NOTIFY received on a listening connection.
public struct PostgresNotification: Sendable, Equatable {
    public var channel: String
    public var payload: String
    public var backendPID: Int32
}
