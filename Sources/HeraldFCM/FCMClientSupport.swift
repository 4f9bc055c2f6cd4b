import Foundation
import HeraldCore
import HeraldHTTP2
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A failure before or instead of an FCM answer.
struct FCMSendError: Error {
    var status: Int?
    var reason: String
    var disposition: FCMDisposition
}

/// Google's error JSON (protocols.md §12): `status` and the FCM `errorCode` from `details`.
struct FCMErrorBody {
    var status: String?
    var errorCode: String?
    var isPerDevice = false

    init(_ response: HTTP2Response) {
        guard let object = response.body.flatMap(FCMClient.json), let error = object["error"] as? [String: Any] else {
            return
        }
        status = error["status"] as? String
        for detail in error["details"] as? [[String: Any]] ?? [] {
            let type = detail["@type"] as? String ?? ""
            if type.hasSuffix("FcmError") { errorCode = detail["errorCode"] as? String }
            if type.hasSuffix("QuotaFailure") {
                for violation in detail["violations"] as? [[String: Any]] ?? [] {
                    let text =
                        ((violation["subject"] as? String) ?? "") + " " + ((violation["description"] as? String) ?? "")
                    if text.lowercased().contains("device") { isPerDevice = true }
                }
            }
        }
    }
}

/// The cached access token; concurrent callers share one exchange.
actor FCMAccessTokenCache {
    private var cached: (token: String, expires: Date)?
    private var inFlight: Task<(String, Date), any Error>?
    /// The last exchange's failure, repeated to callers until `until`.
    private var failure: (error: any Error, until: Date)?

    func token(
        now: Date, margin: TimeInterval, cooldown: TimeInterval,
        exchange: @escaping @Sendable () async throws -> (String, Date)
    ) async throws -> String {
        if let cached, cached.expires.timeIntervalSince(now) > margin { return cached.token }
        if let inFlight { return try await inFlight.value.0 }
        if let failure, now < failure.until { throw failure.error }
        let task = Task { try await exchange() }
        inFlight = task
        defer { inFlight = nil }
        do {
            let fresh = try await task.value
            cached = (fresh.0, fresh.1)
            failure = nil
            return fresh.0
        } catch {
            failure = (error, now.addingTimeInterval(cooldown))
            throw error
        }
    }

    func invalidate() { cached = nil }
}

/// The send endpoint's connections, made on first use and replaced when they stop taking requests.
actor FCMConnectionPool {
    private var slots: [Task<FCMConnection, any Error>?]
    private var next = 0

    init(size: Int) { slots = Array(repeating: nil, count: size) }

    func connection(using connect: @escaping @Sendable () async throws -> FCMConnection) async throws -> FCMConnection {
        let index = next
        next = (next + 1) % slots.count
        if let task = slots[index] {
            if let connection = try? await task.value, connection.isUsable { return connection }
            if let current = slots[index], current != task { return try await current.value }
        }
        let task = Task { try await connect() }
        slots[index] = task
        do {
            return try await task.value
        } catch {
            if slots[index] == task { slots[index] = nil }
            throw error
        }
    }

    func closeAll() async {
        for slot in slots {
            if let connection = try? await slot?.value { connection.close() }
        }
        slots = slots.map { _ in nil }
    }
}

extension String {
    /// `application/x-www-form-urlencoded` value encoding.
    var formEncoded: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed) ?? self
    }
}
