package import Foundation

#if canImport(Glibc)
    import Glibc
#endif

extension UUID {
    /// A random (version 4) UUID from the C library's userspace generator: Foundation's `UUID()`
    /// opens a device file per call on Linux, which shows in bulk sends.
    package static func random() -> UUID {
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        #if canImport(Glibc)
            withUnsafeMutableBytes(of: &bytes) { arc4random_buf($0.baseAddress!, 16) }
        #else
            var generator = SystemRandomNumberGenerator()
            withUnsafeMutableBytes(of: &bytes) { buffer in
                for index in 0..<16 { buffer[index] = UInt8.random(in: .min ... .max, using: &generator) }
            }
        #endif
        bytes.6 = (bytes.6 & 0x0f) | 0x40
        bytes.8 = (bytes.8 & 0x3f) | 0x80
        return UUID(uuid: bytes)
    }
}
