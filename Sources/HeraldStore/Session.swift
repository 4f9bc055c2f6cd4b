import Foundation
import HeraldPayload
import Logging
import NIOCore
import PostgresNIO
import SQLKit
import SQLiteNIO

/// One operation's hold on the database: SQLKit over its connection, and the connection itself
/// for the hot statements that skip SQLKit's Codable row decoding. Valid only inside the
/// operation (`HeraldStore.exclusive` / `transaction`).
struct Session: Sendable {
    enum Raw: Sendable {
        case sqlite(SQLiteConnection)
        case postgres(PostgresConnection)
    }

    let sql: any SQLDatabase
    let raw: Raw

    /// A bound value or a column read by `query`: the three kinds Herald stores.
    enum Value: Sendable, Equatable {
        case integer(Int64)
        case text(String)
        case null

        var integer: Int64? {
            if case .integer(let value) = self { return value }
            return nil
        }

        var text: String? {
            if case .text(let value) = self { return value }
            return nil
        }
    }

    /// Runs one statement with positional binds written `$1`, `$2`, … (SQLite reads them as
    /// `?1`, `?2`, …) and returns its rows' columns in SELECT order. No query text or bound value
    /// is logged.
    func query(_ sql: String, _ binds: [Value] = []) async throws -> [[Value]] {
        switch raw {
        case .sqlite(let connection):
            let rows = try await connection.query(
                Self.sqliteText(sql),
                binds.map {
                    switch $0 {
                    case .integer(let value): SQLiteData.integer(Int(value))
                    case .text(let value): SQLiteData.text(value)
                    case .null: SQLiteData.null
                    }
                })
            return rows.map { row in
                row.columns.map {
                    switch $0.data {
                    case .integer(let value): .integer(Int64(value))
                    case .text(let value): .text(value)
                    case .float(let value): .integer(Int64(value))
                    case .blob, .null: .null
                    }
                }
            }
        case .postgres(let connection):
            return try await Self.query(connection, sql, Self.bindings(binds))
        }
    }

    /// Runs one of the hot statements (`PreparedSQL`): on PostgreSQL prepared once per
    /// connection and executed by name, so it is not planned again at every call (planning the
    /// outbox's queries over the day partitions took longer than running them); on SQLite like
    /// `query` (SQLiteNIO prepares each call anyway, in microseconds).
    func query<Statement: PreparedSQL>(_ statement: Statement.Type, _ binds: [Value] = []) async throws -> [[Value]] {
        switch raw {
        case .sqlite: return try await query(Statement.sql, binds)
        case .postgres(let connection):
            var result: [[Value]] = []
            for try await row in try await connection.execute(
                Prepared<Statement>(bindings: Self.bindings(binds)), logger: Self.silent)
            {
                result.append(row)
            }
            return result
        }
    }

    static func bindings(_ binds: [Value]) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: binds.count)
        for bind in binds {
            switch bind {
            case .integer(let value): bindings.append(value)
            case .text(let value): bindings.append(value)
            case .null: bindings.appendNull()
            }
        }
        return bindings
    }

    /// Runs one PostgreSQL statement with prepared bindings (arrays for `unnest`), returning
    /// its rows' columns.
    static func query(_ connection: PostgresConnection, _ sql: String, _ bindings: PostgresBindings) async throws
        -> [[Value]]
    {
        var result: [[Value]] = []
        for try await row in try await connection.query(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: silent)
        {
            result.append(try row.map(value(of:)))
        }
        return result
    }

    /// `$n` placeholders as SQLite's numbered `?n`.
    static func sqliteText(_ sql: String) -> String {
        var text = [UInt8]()
        text.reserveCapacity(sql.utf8.count)
        let bytes = Array(sql.utf8)
        for (index, byte) in bytes.enumerated() {
            let isPlaceholder =
                byte == UInt8(ascii: "$") && index + 1 < bytes.count
                && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index + 1])
            text.append(isPlaceholder ? UInt8(ascii: "?") : byte)
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func value(of cell: PostgresCell) throws -> Value {
        guard cell.bytes != nil else { return .null }
        switch cell.dataType {
        case .int8: return .integer(try cell.decode(Int64.self))
        case .int4: return .integer(Int64(try cell.decode(Int32.self)))
        case .int2: return .integer(Int64(try cell.decode(Int16.self)))
        case .bool: return .integer(try cell.decode(Bool.self) ? 1 : 0)
        // numeric (what SUM of bigint answers) comes in PostgreSQL's binary decimal format:
        // read as a String it was bytes, not digits, and every SUM read 0.
        case .numeric: return .integer(NSDecimalNumber(decimal: try cell.decode(Decimal.self)).int64Value)
        default: return .text(try cell.decode(String.self))
        }
    }

    /// Query logging off: the statements carry tokens and user data.
    static let silent = Logger(label: "herald.store.postgres", factory: { _ in SwiftLogNoOpLogHandler() })
}

/// A statement `Session.query(_:_:)` prepares once per PostgreSQL connection (its text is fixed;
/// binds vary).
protocol PreparedSQL {
    static var sql: String { get }
}

/// postgres-nio's prepared statement for a `PreparedSQL`: rows as `Session.Value` columns.
private struct Prepared<Statement: PreparedSQL>: PostgresPreparedStatement {
    typealias Row = [Session.Value]
    static var name: String { "herald_\(String(describing: Statement.self))" }
    static var sql: String { Statement.sql }
    let bindings: PostgresBindings
    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> Row { try row.map(Session.value(of:)) }
}

/// The rows of a bulk insert, bound as one value whatever their number: SQLite reads them out
/// of one JSON array of arrays (`json_each`), PostgreSQL out of one array per column (`unnest`).
/// A multi-row `VALUES` list binds every value and has SQLite parse a statement of thousands of
/// parameters (13% of a bulk enrolment's CPU in SQLite's parser). Cells are appended row after
/// row, in the columns' order.
struct BulkRows {
    enum Kind {
        case text
        case integer
    }

    enum Cell {
        case text(String)
        case integer(Int64)
    }

    let columns: [(name: String, kind: Kind)]
    private(set) var cells: [Cell] = []

    init(_ columns: [(name: String, kind: Kind)], capacity: Int) {
        self.columns = columns
        cells.reserveCapacity(capacity * columns.count)
    }

    mutating func append(_ cell: Cell) { cells.append(cell) }

    var isEmpty: Bool { cells.isEmpty }

    /// `[[row 1's values], …]`.
    var json: String {
        var writer = JSONWriter(capacity: cells.count * 16 + 4)
        writer.raw("[")
        for (index, cell) in cells.enumerated() {
            if index % columns.count != 0 {
                writer.raw(",")
            } else {
                index == 0 ? writer.raw("[") : writer.raw("],[")
            }
            switch cell {
            case .text(let value): writer.string(value)
            case .integer(let value): writer.integer(value)
            }
        }
        writer.raw(cells.isEmpty ? "]" : "]]")
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// One column's values, for `unnest`.
    func texts(_ column: Int) -> [String] {
        stride(from: column, to: cells.count, by: columns.count).map {
            if case .text(let value) = cells[$0] { value } else { "" }
        }
    }

    func integers(_ column: Int) -> [Int64] {
        stride(from: column, to: cells.count, by: columns.count).map {
            if case .integer(let value) = cells[$0] { value } else { 0 }
        }
    }
}

extension Session {
    /// Runs the statement `sql` makes of the rows' source — a table `r` with the columns' names,
    /// bound after `binds` ($1…$n) — and returns its rows as `query` does.
    func query(_ binds: [Value], rows: BulkRows, _ sql: (_ source: String) -> String) async throws -> [[Value]] {
        let first = binds.count + 1
        switch raw {
        case .sqlite:
            let names = rows.columns.enumerated().map { "value ->> \($0.offset) AS \($0.element.name)" }
            return try await query(
                sql("(SELECT \(names.joined(separator: ", ")) FROM json_each($\(first))) r"), binds + [.text(rows.json)]
            )
        case .postgres(let connection):
            var bindings = Self.bindings(binds)
            var arrays: [String] = []
            for (index, column) in rows.columns.enumerated() {
                switch column.kind {
                case .text:
                    bindings.append(rows.texts(index))
                    arrays.append("$\(first + index)::text[]")
                case .integer:
                    bindings.append(rows.integers(index))
                    arrays.append("$\(first + index)::bigint[]")
                }
            }
            let names = rows.columns.map(\.name).joined(separator: ", ")
            return try await Self.query(
                connection, sql("unnest(\(arrays.joined(separator: ", "))) AS r(\(names))"), bindings)
        }
    }
}
