package import Foundation

/// Writes secrets (keys, service accounts, API keys) so no other user can read them at any moment:
/// the bytes go to a new file created with mode 0600, which then replaces the target by rename.
/// (Writing first and `chmod`ing after leaves a window governed by the umask.)
package enum SecretFile {
    package static func write(_ data: Data, to path: String) throws {
        let temporary = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, 0o600)
        guard descriptor >= 0 else {
            throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: temporary])
        }
        var failed = false
        data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    failed = true
                    return
                }
                offset += written
            }
        }
        if fsync(descriptor) != 0 { failed = true }
        close(descriptor)
        guard !failed, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
    }

    /// A string secret, UTF-8.
    package static func write(_ text: String, to path: String) throws {
        try write(Data(text.utf8), to: path)
    }
}
