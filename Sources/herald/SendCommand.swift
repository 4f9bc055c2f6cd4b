import ArgumentParser
import Foundation
import HeraldAPNs
import HeraldCore
import HeraldFCM
import HeraldPayload
import Logging
import Synchronization

/// `herald send`: a test push or a bulk list, straight to APNs (or the simulator).
/// The flag names are a contract: scripts depend on them.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send a notification to one token or a list of tokens through APNs (or FCM with --fcm).",
        discussion: """
            Prints exactly one JSON line on stdout: {"sent":N,"accepted":N,"failed":{"<reason>":count},"seconds":S,"per_second":R}. \
            Progress goes to stderr. Exit 0 when every notification got an answer, 1 when some got none \
            (timeouts, unreachable), 2 on a configuration error (bad key, bad topic, bad flags).
            """)

    @Option(name: .customLong("key-file"), help: "The APNs .p8 signing key (APNs).") var keyFile: String?
    @Option(name: .customLong("key-id"), help: "The key's 10-character key id (APNs).") var keyID: String?
    @Option(name: .customLong("team-id"), help: "The 10-character team id (APNs).") var teamID: String?
    @Option(help: "The app's bundle id; the push type's suffix is added (APNs).") var topic: String?
    @Flag(help: "Send through FCM HTTP v1 instead of APNs (needs --service-account).") var fcm = false
    @Option(name: .customLong("service-account"), help: "FCM: the Google service-account key JSON.") var serviceAccount:
        String?
    @Option(
        name: .customLong("token-endpoint"), help: "FCM: the OAuth2 token endpoint (default: the key file's token_uri)."
    ) var tokenEndpoint: String?
    @Option(
        name: .customLong("android-channel"),
        help: "FCM: the Android notification channel (android.notification.channel_id).") var androidChannel: String?
    @Option(help: "FCM: an image URL shown with the notification (notification.image).") var image: String?
    @Option(name: .customLong("analytics-label"), help: "FCM: fcm_options.analytics_label.") var analyticsLabel: String?
    @Option(help: "production or sandbox (chooses Apple's host unless --endpoint is given).") var environment =
        "sandbox"
    @Option(help: "An explicit https://host[:port] endpoint (the simulator).") var endpoint: String?
    @Option(
        name: .customLong("ca-file"), help: "Extra CA certificates (PEM) to trust, e.g. the simulator's sim-ca.pem.")
    var caFile: String?
    @Option(help: "One device token (hex).") var token: String?
    @Option(name: .customLong("tokens-file"), help: "A file with one hex token per line.") var tokensFile: String?
    @Option(help: "Alert title.") var title: String?
    @Option(help: "Alert subtitle.") var subtitle: String?
    @Option(help: "Alert body.") var body: String?
    @Option(
        name: .customLong("push-type"),
        help: "alert, background, voip, liveactivity, … (default: alert, or background for a silent push).")
    var pushType: String?
    @Option(help: "10, 5 or 1 (default: 10; 5 for background).") var priority: Int?
    @Option(name: .customLong("collapse-id"), help: "apns-collapse-id (at most 64 bytes).") var collapseID: String?
    @Option(name: .customLong("thread-id"), help: "aps.thread-id.") var threadID: String?
    @Option(help: "aps.category.") var category: String?
    @Option(help: "aps.badge.") var badge: Int?
    @Option(help: "aps.sound (\"default\" for the system sound).") var sound: String?
    @Flag(name: .customLong("content-available"), help: "aps.content-available = 1.") var contentAvailable = false
    @Flag(name: .customLong("mutable-content"), help: "aps.mutable-content = 1.") var mutableContent = false
    @Option(help: "apns-expiration, UNIX seconds (0: deliver once or never).") var expiration: Int?
    @Option(help: "A JSON file sent as the payload instead of the one built from the flags.") var payload: String?
    @Option(help: "HTTP/2 connections to open.") var connections = 4
    @Option(help: "Event loop threads for the connections (default: one per four connections, leaving one core free).")
    var threads: Int?
    @Option(help: "Seconds to wait for each answer.") var deadline = 10.0
    @Option(
        name: .customLong("retry-deadline"),
        help:
            "Seconds after which a notification still failing with 429/5xx/GOAWAY is given up (retries go on until then)."
    )
    var retryDeadline = 60.0
    @Option(
        name: .customLong("max-attempts"),
        help: "Also cap the answers a notification may get (default: no cap but --retry-deadline).")
    var maximumAttempts: Int?
    @Option(name: .customLong("retry-base-delay"), help: "First backoff in seconds after a 5xx; doubles per attempt.")
    var retryBaseDelay = 1.0
    @Option(
        name: .customLong("too-many-requests-delay"),
        help: "First delay in seconds before resending to a token answered 429; doubles per attempt.")
    var tooManyRequestsDelay = 5.0
    @Flag(help: "No progress on stderr.") var quiet = false

    func run() async throws {
        bootstrapLogging(defaultLevel: .warning)
        do {
            guard retryDeadline > 0, retryDeadline <= 86_400 else {
                throw SendConfigurationError("--retry-deadline is seconds, more than 0 and at most 86400")
            }
            let summary = fcm ? try await sendFCM() : try await send()
            printOutput(summary.json)
            if summary.configurationError { throw ExitCode(2) }
            if summary.unanswered > 0 { throw ExitCode(1) }
        } catch let error as SendConfigurationError {
            printError("herald send: \(error.message)")
            throw ExitCode(2)
        }
    }

    private func send() async throws -> SendSummary {
        guard let environment = APNSEnvironment(rawValue: environment) else {
            throw SendConfigurationError("--environment is production or sandbox, not \"\(self.environment)\"")
        }
        guard let keyFile, let keyID, let teamID, let topic else {
            throw SendConfigurationError(
                "APNs needs --key-file, --key-id, --team-id and --topic (or use --fcm --service-account FILE)")
        }
        let key: APNSSigningKey
        do {
            key = try APNSSigningKey(file: keyFile, keyID: keyID, teamID: teamID)
        } catch {
            throw SendConfigurationError("--key-file: \(error.message)")
        }
        var configuration: APNSClientConfiguration
        do {
            let target = try endpoint.map(APNSEndpoint.init(url:)) ?? environment.endpoint
            configuration = APNSClientConfiguration(
                endpoint: target, additionalCAFile: caFile, connections: connections)
        } catch {
            throw SendConfigurationError("--endpoint: \(error.message)")
        }
        configuration.requestDeadline = deadline
        configuration.retry.maximumAttempts = max(1, maximumAttempts ?? .max)
        configuration.retry.retryDeadline = retryDeadline
        configuration.retry.baseDelay = retryBaseDelay
        configuration.retry.tooManyRequestsDelay = tooManyRequestsDelay

        let tokens = try loadTokens()
        let content = self.content
        let payloadData = try buildPayload(content)
        let client: APNSClient
        do {
            client = try APNSClient(key: key, configuration: configuration, threads: threads)
        } catch {
            throw SendConfigurationError("--ca-file: \(error.message)")
        }

        let progress = SendProgress(total: tokens.count)
        let started = ContinuousClock.now
        let showProgress = !quiet && tokens.count > 1
        let elapsed = await withTaskGroup(of: Void.self, returning: Duration.self) { group in
            if showProgress {
                group.addTask {
                    let interactive = isatty(STDERR_FILENO) == 1
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .milliseconds(500))
                        let line = progress.line(elapsed: ContinuousClock.now - started)
                        FileHandle.standardError.write(Data((interactive ? "\r" + line : line + "\n").utf8))
                    }
                }
            }
            // Submit in chunks, keeping a bounded window in flight so memory stays flat for any list size.
            let window = max(2_000, connections * 2_000)
            let chunkSize = 1_000
            var index = 0
            while index < tokens.count {
                await progress.waitUntilOutstanding(below: window)
                let end = min(tokens.count, index + chunkSize)
                let batch = tokens[index..<end].map { token in
                    APNSRenderer.notification(
                        content, payload: payloadData, deviceToken: token, bundleID: topic, apnsID: .random())
                }
                progress.submitted(batch.count)
                client.submit(batch) { result in progress.record(result) }
                index = end
            }
            await client.waitUntilIdle()
            let elapsed = ContinuousClock.now - started
            group.cancelAll()
            return elapsed
        }
        if showProgress {
            FileHandle.standardError.write(Data((progress.line(elapsed: elapsed) + "\n").utf8))
        }
        let disabled = client.disabledReason
        await client.shutdown(gracePeriod: 1)
        if let disabled {
            printError(
                "herald send: APNs refused the credential or topic (\(disabled.rawValue)); check --key-file, --key-id, --team-id, --topic and --environment"
            )
        }
        return progress.summary(elapsed: elapsed, configurationError: disabled != nil)
    }

    /// `--fcm`: the same tokens and summary line, through FCM HTTP v1.
    private func sendFCM() async throws -> SendSummary {
        guard let serviceAccount else { throw SendConfigurationError("--fcm needs --service-account FILE") }
        let account: FCMServiceAccount
        do {
            account = try FCMServiceAccount(file: serviceAccount)
        } catch {
            throw SendConfigurationError("--service-account: \(error.message)")
        }
        var configuration = FCMClientConfiguration()
        if let endpoint { configuration.endpoint = endpoint }
        configuration.tokenEndpoint = tokenEndpoint
        configuration.caFile = caFile
        configuration.connections = connections
        configuration.requestTimeout = deadline
        configuration.maximumAttempts = max(1, maximumAttempts ?? .max)
        configuration.retryDeadline = retryDeadline
        configuration.baseDelay = retryBaseDelay
        configuration.quotaDelay = tooManyRequestsDelay
        let client: FCMClient
        do {
            client = try FCMClient(account: account, configuration: configuration)
        } catch {
            throw SendConfigurationError("--endpoint/--token-endpoint/--ca-file: \(error.message)")
        }
        let tokens = try loadTokens()
        var data: [String: JSONValue] = [:]
        if let bytes = try payloadObject() {
            // With --fcm the object is the message's data (every value sent as a string).
            data = try JSONDecoder().decode(JSONValue.self, from: bytes).objectValue ?? [:]
        }
        var content = self.content
        content.data = data
        var template = FCMRenderer.message(content, now: Date())
        // An explicit --priority decides FCM's too, for data-only messages as well.
        if let priority { template.highPriority = priority == 10 }
        let progress = SendProgress(total: tokens.count)
        let started = ContinuousClock.now
        let chunkSize = 5_000
        var index = 0
        while index < tokens.count {
            let end = min(tokens.count, index + chunkSize)
            let messages = tokens[index..<end].map { token in
                var message = template
                message.token = token
                return message
            }
            progress.submitted(messages.count)
            for result in await client.send(messages, concurrency: max(1, connections) * 500) {
                progress.record(
                    accepted: result.isDelivered, reason: result.reason ?? "Unknown",
                    unanswered: result.status == nil && result.disposition == .retryLater)
            }
            index = end
            if !quiet && tokens.count > 1 {
                FileHandle.standardError.write(
                    Data((progress.line(elapsed: ContinuousClock.now - started) + "\n").utf8))
            }
        }
        let elapsed = ContinuousClock.now - started
        let disabled = client.disabledReason
        await client.shutdown()
        if let disabled {
            printError(
                "herald send: FCM refused the credentials (\(disabled)); check --service-account and the project")
        }
        return progress.summary(elapsed: elapsed, configurationError: disabled != nil)
    }

    /// The notification the flags describe, for either provider's renderer.
    private var content: NotificationContent {
        let visible = title != nil || subtitle != nil || body != nil || badge != nil || sound != nil
        let pushType =
            self.pushType.map(APNSPushType.init(rawValue:))
            ?? (payload != nil
                ? .alert : NotificationContent.defaultPushType(contentAvailable: contentAvailable, visible: visible))
        return NotificationContent(
            pushType: pushType, priority: priority.map(APNSPriority.init(rawValue:)), title: title, subtitle: subtitle,
            body: body,
            badge: badge, sound: sound, threadID: threadID, category: category, contentAvailable: contentAvailable,
            mutableContent: mutableContent, collapseID: collapseID, expiration: expiration,
            androidChannelID: androidChannel,
            image: image, analyticsLabel: analyticsLabel)
    }

    private func loadTokens() throws -> [String] {
        var tokens: [String] = []
        if let token { tokens.append(contentsOf: Self.tokens(in: Data(token.utf8))) }
        if let tokensFile {
            tokens.append(contentsOf: Self.tokens(in: try readFile(tokensFile, option: "--tokens-file")))
        }
        guard !tokens.isEmpty else { throw SendConfigurationError("give --token or --tokens-file") }
        return tokens
    }

    /// One token per line: blank lines and `#` comments skipped, spaces trimmed. Works on bytes
    /// so every token is a native UTF-8 string (fast to validate and to put in a path).
    static func tokens(in data: Data) -> [String] {
        var tokens: [String] = []
        tokens.reserveCapacity(data.count / 65 + 1)
        data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            let bytes = raw.bindMemory(to: UInt8.self)
            var start = 0
            func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0d }
            while start < bytes.count {
                var end = start
                while end < bytes.count && bytes[end] != 0x0a { end += 1 }
                var low = start
                var high = end
                while low < high && isSpace(bytes[low]) { low += 1 }
                while high > low && isSpace(bytes[high - 1]) { high -= 1 }
                if low < high && bytes[low] != UInt8(ascii: "#") {
                    tokens.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[low..<high]), as: UTF8.self))
                }
                start = end + 1
            }
        }
        return tokens
    }

    /// The bytes of --payload, checked to be a JSON object; `nil` without --payload.
    private func payloadObject() throws -> Data? {
        guard let payload else { return nil }
        let data = try readFile(payload, option: "--payload")
        guard (try? JSONSerialization.jsonObject(with: data)) is [String: Any] else {
            throw SendConfigurationError("--payload: \(payload) is not a JSON object")
        }
        return data
    }

    /// A file named by an option, read through a file handle so pipes (`<(…)`, /dev/stdin) work too.
    private func readFile(_ path: String, option: String) throws -> Data {
        guard let handle = FileHandle(forReadingAtPath: path), let data = try? handle.readToEnd() ?? Data() else {
            throw SendConfigurationError("\(option): cannot read \(path)")
        }
        try? handle.close()
        return data
    }

    /// The APNs payload: --payload as it is, else the flags rendered by `APNSRenderer`.
    private func buildPayload(_ content: NotificationContent) throws -> Data {
        if let data = try payloadObject() { return data }
        do {
            return try APNSRenderer.encoded(content, payloadKey: "")
        } catch {
            throw SendConfigurationError("the payload cannot be encoded: \(error.message)")
        }
    }
}

struct SendConfigurationError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

struct SendSummary {
    var json: String
    var configurationError: Bool
    var unanswered: Int
}

/// Counts results as they arrive from the event loops and lets the submitter wait for room.
final class SendProgress: Sendable {
    private struct State {
        var submitted = 0
        var completed = 0
        var accepted = 0
        var failed: [String: Int] = [:]
        var unanswered = 0
        var waiter: (limit: Int, continuation: CheckedContinuation<Void, Never>)?
    }

    private let total: Int
    private let state = Mutex(State())

    init(total: Int) { self.total = total }

    func submitted(_ count: Int) { state.withLock { $0.submitted += count } }

    func record(_ result: APNSResult) {
        record(
            accepted: result.isAccepted, reason: result.reasonKey,
            unanswered: result.status == nil && result.disposition != .configurationError
                && result.disposition != .badRequest)
    }

    func record(accepted: Bool, reason: String, unanswered: Bool) {
        let resume = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.completed += 1
            if accepted {
                state.accepted += 1
            } else {
                state.failed[reason, default: 0] += 1
                if unanswered { state.unanswered += 1 }
            }
            if let waiter = state.waiter, state.submitted - state.completed < waiter.limit {
                state.waiter = nil
                return waiter.continuation
            }
            return nil
        }
        resume?.resume()
    }

    func waitUntilOutstanding(below limit: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.submitted - state.completed < limit { return true }
                state.waiter = (limit, continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    func line(elapsed: Duration) -> String {
        let seconds = elapsed.seconds
        return state.withLock { state in
            let failed = state.failed.values.reduce(0, +)
            let rate = seconds > 0 ? Int(Double(state.completed) / seconds) : 0
            return "\(state.completed)/\(total) answered, \(state.accepted) accepted, \(failed) failed, \(rate)/s"
        }
    }

    func summary(elapsed: Duration, configurationError: Bool) -> SendSummary {
        let seconds = elapsed.seconds
        return state.withLock { state in
            let failed = state.failed.sorted { $0.key < $1.key }
                .map { "\(SendProgress.quote($0.key)):\($0.value)" }.joined(separator: ",")
            let perSecond = seconds > 0 ? Double(state.completed) / seconds : 0
            let json =
                #"{"sent":\#(state.submitted),"accepted":\#(state.accepted),"failed":{\#(failed)},"seconds":\#(String(format: "%.3f", seconds)),"per_second":\#(String(format: "%.1f", perSecond))}"#
            return SendSummary(json: json, configurationError: configurationError, unanswered: state.unanswered)
        }
    }

    private static func quote(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}
