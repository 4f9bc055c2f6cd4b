package import NIOCore
package import NIOHPACK

/// A request's headers in two parts: the fields every request of a kind shares (`fixed`: the
/// method, scheme and authority, the credential, the topic…, pseudo-headers first) and the fields
/// each request has of its own (`own`: the path, an id, a length), never put in the dynamic table.
package struct HTTP2RequestHeaders {
    /// The shared fields' names, lowercase, in the order they are sent.
    package var fixedNames: [String]
    /// Their values, in the same order.
    package var fixedValues: [String]
    /// The request's own fields (lowercase names), sent as literals without indexing.
    package var own: [(name: String, value: String)]

    package init(fixedNames: [String], fixedValues: [String], own: [(name: String, value: String)]) {
        self.fixedNames = fixedNames
        self.fixedValues = fixedValues
        self.own = own
    }
}

/// The HPACK encoding of the shared fields once each sits in the dynamic table: a block of
/// indexed references, reused for every request with the same values instead of encoding them
/// again (NIOHPACK's encoder hashes and searches its table for every field of every request).
/// Only this connection's encoder changes the table the peer keeps, so a block stays what the
/// peer resolves to the same fields until the encoder inserts something (`encodeAndKeep`).
package struct HTTP2HeaderTemplates {
    @usableFromInline var kept: [(values: [String], block: [UInt8])] = []
    /// At most this many sets of shared values are kept (a connection carries few: a topic, a
    /// push type and a priority or two per app).
    @usableFromInline static let capacity = 8

    package init() {}

    /// Forgets every block (the peer's table may have changed size).
    package mutating func reset() { kept.removeAll(keepingCapacity: true) }

    /// A HEADERS frame for stream `streamID` (its body follows) with the block of `headers`.
    package static func writeHeaders(
        _ headers: HTTP2RequestHeaders, templates: inout HTTP2HeaderTemplates, encoder: inout HPACKEncoder,
        into buffer: inout ByteBuffer, streamID: Int32, maximumFrameSize: Int
    ) throws {
        try HTTP2Wire.writeHeaders(
            into: &buffer, streamID: streamID, endStream: false, maximumFrameSize: maximumFrameSize
        ) { try templates.encode(headers, encoder: &encoder, into: &$0) }
    }

    /// Writes the header block of `headers` into `buffer`. Pseudo-header fields come before all
    /// others (RFC 9113 §8.3): the request's own first, then the shared ones, then the rest.
    package mutating func encode(
        _ headers: HTTP2RequestHeaders, encoder: inout HPACKEncoder, into buffer: inout ByteBuffer
    ) throws {
        guard let block = kept.first(where: { $0.values == headers.fixedValues })?.block else {
            try encodeAndKeep(headers, encoder: &encoder, into: &buffer)
            return
        }
        for field in headers.own where field.name.utf8.first == UInt8(ascii: ":") {
            Self.writeLiteral(name: field.name, value: field.value, into: &buffer)
        }
        buffer.writeBytes(block)
        for field in headers.own where field.name.utf8.first != UInt8(ascii: ":") {
            Self.writeLiteral(name: field.name, value: field.value, into: &buffer)
        }
    }

    /// Values without a kept block. When blocks are kept (so no table size update is due: a
    /// SETTINGS frame drops them all), a copy of the encoder tries the shared fields first: all
    /// indexed references means they are in the table already, the block is kept and nothing
    /// else changes. Otherwise the whole block goes through the encoder (a due size update first,
    /// the new fields inserted, which moves the indexes every kept block refers to, so they are
    /// dropped), and the shared fields once more, now all in the table, make the block kept.
    @usableFromInline
    mutating func encodeAndKeep(
        _ headers: HTTP2RequestHeaders, encoder: inout HPACKEncoder, into buffer: inout ByteBuffer
    ) throws {
        var fixed = HPACKHeaders()
        fixed.reserveCapacity(headers.fixedNames.count)
        for (name, value) in zip(headers.fixedNames, headers.fixedValues) { fixed.add(name: name, value: value) }
        if !kept.isEmpty {
            var probe = encoder
            if let block = try Self.indexedBlock(fixed, &probe, count: headers.fixedNames.count) {
                keep(headers.fixedValues, block)
                try encode(headers, encoder: &encoder, into: &buffer)
                return
            }
        }
        var all = HPACKHeaders()
        all.reserveCapacity(headers.fixedNames.count + headers.own.count)
        for field in headers.own where field.name.utf8.first == UInt8(ascii: ":") {
            all.add(name: field.name, value: field.value, indexing: .nonIndexable)
        }
        all.add(contentsOf: fixed)
        for field in headers.own where field.name.utf8.first != UInt8(ascii: ":") {
            all.add(name: field.name, value: field.value, indexing: .nonIndexable)
        }
        try encoder.encode(headers: all, to: &buffer)
        kept.removeAll(keepingCapacity: true)
        if let block = try Self.indexedBlock(fixed, &encoder, count: headers.fixedNames.count) {
            keep(headers.fixedValues, block)
        }
    }

    @usableFromInline
    mutating func keep(_ values: [String], _ block: [UInt8]) {
        if kept.count == Self.capacity { kept.removeFirst() }
        kept.append((values, block))
    }

    /// `fields` encoded by `encoder` when each is one indexed reference (a byte with its top bit
    /// set), else nil.
    @usableFromInline
    static func indexedBlock(_ fields: HPACKHeaders, _ encoder: inout HPACKEncoder, count: Int) throws -> [UInt8]? {
        var scratch = ByteBuffer()
        try encoder.encode(headers: fields, to: &scratch)
        let block = Array(scratch.readableBytesView)
        return block.count == count && block.allSatisfy({ $0 & 0x80 != 0 }) ? block : nil
    }

    /// A literal field without indexing (RFC 7541 §6.2.2), no Huffman coding: by the static
    /// table's index of its name when it has one.
    @usableFromInline
    static func writeLiteral(name: String, value: String, into buffer: inout ByteBuffer) {
        if let index = staticNameIndex(name) {
            writeInteger(index, prefixBits: 4, flags: 0x00, into: &buffer)
        } else {
            buffer.writeInteger(UInt8(0))
            writeString(name, into: &buffer)
        }
        writeString(value, into: &buffer)
    }

    /// The static table's index of the names requests here use as their own fields.
    @usableFromInline
    static func staticNameIndex(_ name: String) -> Int? {
        switch name {
        case ":path": 4
        case "content-length": 28
        default: nil
        }
    }

    /// An octet string without Huffman coding: its length (7-bit prefix, H = 0), then its bytes.
    @usableFromInline
    static func writeString(_ text: String, into buffer: inout ByteBuffer) {
        writeInteger(text.utf8.count, prefixBits: 7, flags: 0x00, into: &buffer)
        buffer.writeString(text)
    }

    /// An integer with an N-bit prefix (RFC 7541 §5.1), `flags` in the bits above it.
    @usableFromInline
    static func writeInteger(_ value: Int, prefixBits: Int, flags: UInt8, into buffer: inout ByteBuffer) {
        let limit = (1 << prefixBits) - 1
        guard value >= limit else {
            buffer.writeInteger(flags | UInt8(value))
            return
        }
        buffer.writeInteger(flags | UInt8(limit))
        var rest = value - limit
        while rest >= 128 {
            buffer.writeInteger(UInt8(rest & 0x7f | 0x80))
            rest >>= 7
        }
        buffer.writeInteger(UInt8(rest))
    }
}
