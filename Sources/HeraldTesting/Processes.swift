package import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a process to the end without blocking a Swift concurrency thread; returns its exit
/// status and what it wrote to stdout and stderr.
package func runProcess(_ executable: URL, _ arguments: [String]) async throws -> (
    status: Int32, stdout: String, stderr: String
) {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
        do { try process.run() } catch { continuation.resume(throwing: error) }
    }
    return (
        status, String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self),
        String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    )
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
