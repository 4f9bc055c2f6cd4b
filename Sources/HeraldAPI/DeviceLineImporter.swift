import Foundation
package import HeraldStore
package import HeraldWebPush
package import NIOCore

/// Turns a stream of JSON-lines bytes into device upserts, 15,000 per transaction, so any number
/// of lines is imported in flat memory. Used by `POST …/devices/import` and `herald devices import`.
/// A bad line stops the import with a `DeviceImportError` naming `line N: field`; earlier lines
/// stay imported.
///
/// One batch is written while the next is parsed (the store works on its own threads), so a
/// 2-core machine decodes JSON and runs SQLite at the same time; at most two batches are held.
package final class DeviceLineImporter {
    private let store: HeraldStore
    private let appID: String
    private let rules: DeviceRegistrationRules
    /// Where web push subscriptions may point (the app's `webpush.allowed_hosts`).
    private let endpoints: WebPushEndpointPolicy
    private var pending = ByteBuffer()
    private var batch: [DeviceRecord] = []
    /// The batch being written, if any.
    private var writing: Task<Int, any Error>?
    private var lineNumber = 0
    /// Devices written so far.
    package private(set) var imported = 0
    /// The store's statistics are refreshed each time the import doubles past this many.
    private var refreshStatisticsAt = 10_000
    static let batchSize = 15_000
    static let maximumLineLength = 1 << 16

    package init(
        store: HeraldStore, appID: String, rules: DeviceRegistrationRules = DeviceRegistrationRules(),
        endpoints: WebPushEndpointPolicy = WebPushEndpointPolicy()
    ) {
        self.store = store
        self.appID = appID
        self.rules = rules
        self.endpoints = endpoints
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
        try await awaitWrite()
    }

    private func drainLines() async throws {
        while let newline = pending.readableBytesView.firstIndex(of: 0x0a) {
            let line = pending.readSlice(length: newline - pending.readerIndex)!
            pending.moveReaderIndex(forwardBy: 1)
            try await handle(line.readableBytesView)
        }
        guard pending.readableBytes <= Self.maximumLineLength else {
            throw DeviceImportError(
                code: "invalid_field", field: "line \(lineNumber + 1)", message: "a line is longer than 64 KiB")
        }
        pending.discardReadBytes()
    }

    private func handle(_ line: ByteBufferView) async throws {
        lineNumber += 1
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0d }
        guard line.contains(where: { !isSpace($0) }) else { return }
        let number = lineNumber
        do {
            let fast = line.withUnsafeBytes(DeviceLineDecoder.decode)
            let body = try fast ?? HeraldAPI.decodeJSON(DeviceBody.self, Data(line), prefix: "line \(number): ")
            batch.append(try body.validated(prefix: "line \(number): ", endpoints: endpoints))
        } catch let error as APIError {
            try await flush()
            try await awaitWrite()
            throw DeviceImportError(
                code: error.code, field: error.field ?? "line \(number)",
                message: error.message + " (line \(number); the \(imported) devices before it were imported)")
        }
        if batch.count >= Self.batchSize { try await flush() }
    }

    /// Starts writing the batch once the previous one is written.
    private func flush() async throws {
        guard !batch.isEmpty else { return }
        try await awaitWrite()
        let (store, appID, rules, devices) = (store, appID, rules, batch)
        let refreshStatistics = imported + batch.count >= refreshStatisticsAt
        if refreshStatistics { refreshStatisticsAt *= 2 }
        writing = Task {
            let written = try await store.devices.importDevices(appID: appID, devices, rules: rules)
            if refreshStatistics { try await store.devices.refreshDeviceStatistics() }
            return written
        }
        batch.removeAll(keepingCapacity: true)
    }

    /// Waits for the batch being written when the import stops early (its input failed): no
    /// write outlives the import. Its error is dropped; the input's is the one to report.
    package func abandon() async {
        guard let task = writing else { return }
        writing = nil
        _ = try? await task.value
    }

    private func awaitWrite() async throws {
        guard let task = writing else { return }
        writing = nil
        imported += try await task.value
    }
}

/// Why an import stopped: the line and field to blame, and what is wrong with it.
package struct DeviceImportError: Error, Sendable, CustomStringConvertible {
    /// The API's error code for it (`invalid_field`, `missing_field`, `invalid_json`).
    package var code: String
    package var field: String
    package var message: String

    package var description: String { "\(field): \(message)" }
}
