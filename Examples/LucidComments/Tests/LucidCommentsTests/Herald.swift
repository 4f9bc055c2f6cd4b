import Foundation
import LucidComments
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A live Herald for the tests: `herald sim` (APNs on TLS) and `herald serve` with Lucid's
/// catalog (`Examples/lucid.yaml`), processes of the Herald binary, in a folder of their own.
final class Herald: Sendable {
    static let serverKey = "lucid-server-key-0123456789"
    let directory: String
    let simControl: Int
    let port: Int
    private let processes = ProcessList()

    var client: HeraldClient { HeraldClient(baseURL: URL(string: "http://127.0.0.1:\(port)")!, app: "lucid", serverKey: Self.serverKey) }

    /// The Herald binary: `HERALD_BIN`, else the checkout's debug build.
    static var binary: String {
        if let path = ProcessInfo.processInfo.environment["HERALD_BIN"] { return path }
        return checkout + "/.build/debug/herald"
    }

    /// The Herald checkout this example lives in.
    static var checkout: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().path
    }

    private init(directory: String) throws {
        self.directory = directory
        (simControl, port) = (try Self.freePort(), try Self.freePort())
    }

    static func with(_ body: (Herald) async throws -> Void) async throws {
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            Issue.record("no Herald binary at \(binary): build Herald first (swift build in the checkout) or set HERALD_BIN")
            return
        }
        let directory = NSTemporaryDirectory() + "lucid-comments-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let herald = try Herald(directory: directory)
        do {
            try await herald.start()
            try await body(herald)
        } catch {
            herald.processes.stopAll()
            throw error
        }
        herald.processes.stopAll()
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func start() async throws {
        let simPort = try Self.freePort()
        try processes.launch(
            "sim", Self.binary,
            ["sim", "--port", "\(simPort)", "--control-port", "\(simControl)", "--tls-dir", directory + "/sim", "--topic", "com.example.lucid"],
            directory: directory)
        try await Self.waitFor("http://127.0.0.1:\(simControl)/inbox")
        let configuration = """
            server: { host: 127.0.0.1, port: \(port) }
            database: { url: "sqlite://\(directory)/herald.sqlite" }
            apps:
              - id: lucid
                keys: { server: "\(Self.serverKey)" }
                catalog: "\(Self.checkout)/Examples/lucid.yaml"
                apns: { team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: "sim/demo-AuthKey.p8", topic: com.example.lucid,
                        environment: sandbox, endpoint: "https://127.0.0.1:\(simPort)", ca_file: "sim/sim-ca.pem" }
            """
        try configuration.write(toFile: directory + "/herald.yaml", atomically: true, encoding: .utf8)
        try await startServer()
    }

    func startServer() async throws {
        try processes.launch("serve", Self.binary, ["serve", "--config", directory + "/herald.yaml"], directory: directory)
        try await Self.waitFor("http://127.0.0.1:\(port)/healthz")
    }

    /// Stops `herald serve` (SIGTERM, as an orchestrator would) and waits for it to exit.
    func stopServer() async throws {
        processes.stop("serve")
    }

    /// Registers a device for `user` with a fresh token; returns the token.
    func register(user: String, device: String) async throws -> String {
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let body = #"{"device_id":"\#(device)","user_id":"\#(user)","token":"\#(token)","environment":"sandbox"}"#
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/apps/lucid/devices")!)
        request.httpMethod = "POST"
        request.setValue("Bearer \(Self.serverKey)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(body.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        guard (response as? HTTPURLResponse)?.statusCode == 201 else { throw Failure("registering \(device) answered \(response)") }
        return token
    }

    /// The simulator's inbox for `token`, once it holds at least `count` (10 s at most).
    func inbox(_ token: String, count: Int) async throws -> [[String: Any]] {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(simControl)/inbox/\(token)")!)
            let object = try JSONSerialization.jsonObject(with: data)
            let entries = (object as? [[String: Any]]) ?? ((object as? [String: Any])?["notifications"] as? [[String: Any]]) ?? []
            if entries.count >= count || ContinuousClock.now > deadline { return entries }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    static func waitFor(_ url: String) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let (_, response) = try? await URLSession.shared.data(from: URL(string: url)!), (response as? HTTPURLResponse)?.statusCode == 200 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw Failure("\(url) did not answer within 30 s")
    }

    /// A port nothing listens on now (the kernel's pick for a socket bound to port 0).
    static func freePort() throws -> Int {
        let socket = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure("socket() failed") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else { throw Failure("bind() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// Child processes by name, stopped with SIGTERM.
final class ProcessList: @unchecked Sendable {
    private let lock = NSLock()
    private var processes: [String: Process] = [:]

    func launch(_ name: String, _ executable: String, _ arguments: [String], directory: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var environment = ProcessInfo.processInfo.environment
        environment["HERALD_LOG_LEVEL"] = environment["HERALD_LOG_LEVEL"] ?? "warning"
        process.environment = environment
        _ = FileManager.default.createFile(atPath: directory + "/\(name).log", contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/\(name).log"))
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        lock.withLock { processes[name] = process }
    }

    func stop(_ name: String) {
        guard let process = lock.withLock({ processes.removeValue(forKey: name) }) else { return }
        process.terminate()
        process.waitUntilExit()
    }

    func stopAll() {
        for name in lock.withLock({ Array(processes.keys) }) { stop(name) }
    }
}
