import Foundation
package import HeraldStore
package import NIOCore

/// Turns a stream of JSON-lines bytes into device upserts, 1,000 per transaction, so any number
/// of lines is imported in flat memory. Used by `POST …/devices/import` and `herald devices import`.
/// A bad line stops the import with an `APIError` naming `line N: field`; earlier lines stay imported.
package final class DeviceLineImporter {
    private let store: HeraldStore
    private let appID: String
    private let rules: DeviceRegistrationRules
    private var pending = ByteBuffer()
    private var batch: [DeviceRecord] = []
    private var lineNumber = 0
    /// Devices written so far.
    package private(set) var imported = 0
    static let batchSize = 1_000
    static let maximumLineLength = 1 << 16

    package init(store: HeraldStore, appID: String, rules: DeviceRegistrationRules = DeviceRegistrationRules()) {
        self.store = store
        self.appID = appID
        self.rules = rules
        batch.reserveCapacity(Self.batchSize)
    }

    /// Adds bytes; complete lines are parsed and written in batches.
    package func feed(_ bytes: some Sequence<UInt8>) async throws {
        pending.writeBytes(bytes)
        try await drainLines()
    }

    /// Adds a buffer (the HTTP body's chunks).
    package func feed(buffer: ByteBuffer) async throws {
        var buffer = buffer
        pending.writeBuffer(&buffer)
        try await drainLines()
    }

    /// Handles a last line without a newline and writes what is left.
    package func finish() async throws {
        if pending.readableBytes > 0 {
            let line = pending.readSlice(length: pending.readableBytes)!
            try await handle(line.readableBytesView)
        }
        try await flush()
    }

    private func drainLines() async throws {
        while let newline = pending.readableBytesView.firstIndex(of: 0x0a) {
            let line = pending.readSlice(length: newline - pending.readerIndex)!
            pending.moveReaderIndex(forwardBy: 1)
            try await handle(line.readableBytesView)
        }
        guard pending.readableBytes <= Self.maximumLineLength else {
            throw APIError.invalid("line \(lineNumber + 1)", "a line is longer than 64 KiB")
        }
        pending.discardReadBytes()
    }

    private func handle(_ line: ByteBufferView) async throws {
        lineNumber += 1
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0d }
        guard line.contains(where: { !isSpace($0) }) else { return }
        let prefix = "line \(lineNumber): "
        do {
            let body = try HeraldAPI.decodeJSON(DeviceBody.self, Data(line), prefix: prefix)
            batch.append(try body.validated(prefix: prefix))
        } catch var error as APIError {
            try await flush()
            error.message += " (line \(lineNumber); the \(imported) devices before it were imported)"
            throw error
        }
        if batch.count >= Self.batchSize { try await flush() }
    }

    private func flush() async throws {
        guard !batch.isEmpty else { return }
        imported += try await store.importDevices(appID: appID, batch, rules: rules)
        batch.removeAll(keepingCapacity: true)
    }
}
