package import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a process to the end without blocking a Swift concurrency thread; returns its exit
/// status and what it wrote to stdout and stderr.
package func runProcess(_ executable: URL, _ arguments: [String]) async throws -> (
    status: Int32, stdout: String, stderr: String
) {
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("herald-run-\(UUID().uuidString)").path
    defer {
        unlink(base + ".out")
        unlink(base + ".err")
    }
    let process = try ChildProcess(executable.path, arguments, stdout: base + ".out", stderr: base + ".err")
    await process.waitUntilExit()
    return (
        process.terminationStatus,
        (try? String(contentsOfFile: base + ".out", encoding: .utf8)) ?? "",
        (try? String(contentsOfFile: base + ".err", encoding: .utf8)) ?? ""
    )
}

/// A process started with `posix_spawn`, for tests that run `herald`, `curl` and the like.
///
/// Foundation's `Process.run()` on Linux (Swift 6.3.1) finds the highest open descriptor by
/// copying each `/proc/self/fd` entry as a whole 256-byte `dirent` name, which can read past the
/// end of glibc's buffer and crash the whole test run (seen here: a SIGSEGV in `memcpy` under
/// `Process.run()`). This spawns without that: the child gets stdin from /dev/null, stdout and
/// stderr into files (or /dev/null), no other descriptor of ours, and a process group of its own.
package final class ChildProcess: Sendable {
    /// Why a process could not be started.
    package struct SpawnError: Error, CustomStringConvertible {
        package let executable: String
        package let code: Int32
        package var description: String { "cannot start \(executable): \(String(cString: strerror(code)))" }
    }

    package let processIdentifier: pid_t

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc
    /// module does not declare: looked up once; without it children inherit what is not
    /// close-on-exec.
    private static let closeFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? =
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np").map {
            unsafeBitCast(
                $0, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
        }
    /// The exit status once the process is reaped (its signal's number if a signal ended it).
    private let status = Mutex<Int32?>(nil)

    /// Starts `executable` (a path) with `arguments`, in `environment` (default: this process's),
    /// its stdout and stderr appended to the files named (created if missing), else discarded.
    package init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, stdout: String? = nil,
        stderr: String? = nil
    ) throws(SpawnError) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        for (descriptor, path) in [(Int32(1), stdout), (Int32(2), stderr)] {
            posix_spawn_file_actions_addopen(
                &actions, descriptor, path ?? "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0o644)
        }
        _ = Self.closeFrom?(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))

        let environment = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else { throw SpawnError(executable: executable, code: result) }
        processIdentifier = pid
    }

    /// Whether the process still runs (it is reaped, and its status kept, once it has ended).
    package var isRunning: Bool {
        status.withLock { status in
            if status != nil { return false }
            var raw: Int32 = 0
            guard waitpid(processIdentifier, &raw, WNOHANG) == processIdentifier else { return true }
            // Exited: the status is in bits 8–15; ended by a signal: its number is in bits 0–6.
            status = raw & 0x7f == 0 ? (raw >> 8) & 0xff : raw & 0x7f
            return false
        }
    }

    /// The exit status (a signal's number if one ended it); -1 while the process runs.
    package var terminationStatus: Int32 { isRunning ? -1 : status.withLock { $0 ?? -1 } }

    /// Sends SIGTERM.
    package func terminate() { kill(processIdentifier, SIGTERM) }

    /// Sends SIGINT.
    package func interrupt() { kill(processIdentifier, SIGINT) }

    /// Waits, without blocking a thread, until the process has ended.
    package func waitUntilExit() async {
        while isRunning { try? await Task.sleep(for: .milliseconds(10)) }
    }
}

/// A loopback TCP port nobody listens on right now.
package func freeLoopbackPort() -> Int {
    let (descriptor, port) = boundLoopbackSocket()
    close(descriptor)
    return port
}

/// A TCP socket bound to an ephemeral loopback port (not listening yet), and that port.
package func boundLoopbackSocket() -> (descriptor: Int32, port: Int) {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
            _ = bind(descriptor, socketAddress, length)
            return getsockname(descriptor, socketAddress, &length)
        }
    }
    return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
}
