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

extension UUID {
    /// A time-ordered (version 7, RFC 9562) UUID: the Unix time in milliseconds in its first 48
    /// bits, then random bits. Rows keyed by such ids are inserted at the end of their index,
    /// where random ids land on a different page each: a batch of events then writes a few
    /// pages, not one per event.
    package static func timeOrdered(at date: Date = Date()) -> UUID {
        let random = UUID.random().uuid
        let milliseconds = UInt64(max(0, min(date.timeIntervalSince1970 * 1000, Double(1 << 48 - 1))))
        func byte(_ shift: UInt64) -> UInt8 { UInt8(truncatingIfNeeded: milliseconds >> shift) }
        return UUID(
            uuid: (
                byte(40), byte(32), byte(24), byte(16), byte(8), byte(0), (random.6 & 0x0f) | 0x70, random.7,
                (random.8 & 0x3f) | 0x80, random.9, random.10, random.11, random.12, random.13, random.14, random.15
            ))
    }
}
