import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// systemd's readiness protocol (`sd_notify`): a datagram such as `READY=1` to the Unix socket
/// named by `NOTIFY_SOCKET`, which systemd sets for a `Type=notify` service. Without the
/// variable (not run by systemd) nothing is sent. A notification is advisory: a socket that
/// cannot be reached is reported to the caller and changes nothing else.
enum SystemdNotify {
    /// Sends `state` (lines such as `READY=1`, `STOPPING=1`, `STATUS=…`); false when there is
    /// no socket to send to or the send failed.
    @discardableResult
    static func send(_ state: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty else { return false }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var name = Array(path.utf8)
        // "@name": Linux's abstract namespace, whose names begin with a NUL byte.
        if name.first == UInt8(ascii: "@") { name[0] = 0 }
        guard name.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: name) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + name.count)
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        let payload = Array(state.utf8)
        let sent = payload.withUnsafeBytes { bytes in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                    sendto(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), socketAddress, length)
                }
            }
        }
        return sent == payload.count
    }
}
