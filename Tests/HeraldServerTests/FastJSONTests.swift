import Foundation
import HTTPTypes
import HeraldPayload
import HeraldStore
import Testing

@testable import HeraldAPI

/// The opens' and receipts' bodies and answers skip JSONDecoder and JSONEncoder: what the fast
/// path reads and writes must be what they would have.
@Suite("Fast JSON for the hot routes")
struct FastJSONTests {
    static func flat<Body>(_ text: String, _ read: (UnsafeRawBufferPointer) -> Body?) -> Body? {
        Array(text.utf8).withUnsafeBytes(read)
    }

    @Test("an open's body is read as JSONDecoder reads it, or handed to it")
    func openBodies() throws {
        let plain = [
            #"{"delivery_id":42,"device_id":"iphone-1","action":"default"}"#,
            #" { "delivery_id" : "42" , "device_id":"Zoë's iPhone", "at":"2026-12-01T09:00:00Z", "other": 7 }\#n"#,
            #"{"delivery_id":null,"device_id":null,"action":null,"at":null}"#,
            #"{"delivery_id":0,"device_id":"","unknown":true,"skip":false}"#,
            #"{"delivery_id":999999999999999999}"#,
            "{}",
        ]
        for text in plain {
            let fast = try #require(Self.flat(text) { OpenedBody(flat: $0) }, "\(text)")
            let reference = try JSONDecoder().decode(OpenedBody.self, from: Data(text.utf8))
            #expect(fast.deliveryID == reference.deliveryID, "\(text)")
            #expect(fast.deviceID == reference.deviceID, "\(text)")
            #expect(fast.action == reference.action, "\(text)")
            #expect(fast.at == reference.at, "\(text)")
        }
        #expect(Self.flat(plain[1]) { OpenedBody(flat: $0) }?.deviceID == "Zoë's iPhone")
        // What the fast path leaves to JSONDecoder: its answer (or its 400 naming the field) stands.
        let other = [
            #"{"delivery_id":4.5,"device_id":"d"}"#,
            #"{"delivery_id":1e3,"device_id":"d"}"#,
            #"{"delivery_id":-4,"device_id":"d"}"#,
            #"{"delivery_id":042,"device_id":"d"}"#,
            #"{"delivery_id":1234567890123456789,"device_id":"d"}"#,
            #"{"delivery_id":true,"device_id":"d"}"#,
            #"{"delivery_id":1,"device_id":5}"#,
            #"{"delivery_id":1,"device_id":"d\u0031"}"#,
            #"{"delivery_id":1,"device_id":"d","data":{"a":1}}"#,
            #"{"delivery_id":1,"delivery_id":2}"#,
            #"{"delivery_id":1,}"#,
            #"{"delivery_id":1} x"#,
            #"[1]"#,
            "",
        ]
        for text in other { #expect(Self.flat(text) { OpenedBody(flat: $0) } == nil, "\(text)") }
        #expect(try HeraldAPI.decodeJSON(OpenedBody.self, Data(other[0].utf8)).deliveryID == .double(4.5))
        #expect(try HeraldAPI.decodeJSON(OpenedBody.self, Data(other[7].utf8)).deviceID == "d1")
        #expect(throws: APIError.self) { try HeraldAPI.decodeJSON(OpenedBody.self, Data(other[6].utf8)) }
        let invalidUTF8: [UInt8] = Array(#"{"delivery_id":1,"device_id":""#.utf8) + [0xFF] + Array(#""}"#.utf8)
        #expect(invalidUTF8.withUnsafeBytes { OpenedBody(flat: $0) } == nil)
    }

    @Test("a receipt's body is read as JSONDecoder reads it; a batch goes to JSONDecoder")
    func receiptBodies() throws {
        let plain = [
            #"{"delivery_id":7,"device_id":"d","at":"2026-12-01T09:00:00Z","displayed":false}"#,
            #"{"delivery_id":"7","device_id":"d","displayed":null,"receipts":null}"#,
            #"{"device_id":"d","displayed":true}"#,
        ]
        for text in plain {
            let fast = try #require(Self.flat(text) { ReceivedBody(flat: $0) }, "\(text)")
            let reference = try JSONDecoder().decode(ReceivedBody.self, from: Data(text.utf8))
            #expect(fast.receipts == nil && reference.receipts == nil, "\(text)")
            #expect(fast.item.deliveryID == reference.item.deliveryID, "\(text)")
            #expect(fast.item.deviceID == reference.item.deviceID, "\(text)")
            #expect(fast.item.at == reference.item.at, "\(text)")
            #expect(fast.item.displayed == reference.item.displayed, "\(text)")
        }
        let other = [
            #"{"receipts":[{"delivery_id":7,"device_id":"d"}]}"#,
            #"{"receipts":5}"#,
            #"{"delivery_id":7,"device_id":"d","displayed":"yes"}"#,
            #"{"delivery_id":7,"device_id":"d","displayed":1}"#,
        ]
        for text in other { #expect(Self.flat(text) { ReceivedBody(flat: $0) } == nil, "\(text)") }
        #expect(try HeraldAPI.decodeJSON(ReceivedBody.self, Data(other[0].utf8)).receipts?.count == 1)
        #expect(throws: APIError.self) { try HeraldAPI.decodeJSON(ReceivedBody.self, Data(other[2].utf8)) }
    }

    @Test("the answers and the errors' bodies are the bytes the encoder would write")
    func answers() throws {
        func same(_ value: some JSONWritable) throws {
            var writer = JSONWriter()
            value.write(to: &writer)
            let encoded = try JSONResponse.encoder.encode(value)
            #expect(String(decoding: writer.bytes, as: UTF8.self) == String(decoding: encoded, as: UTF8.self))
        }
        let recorded = TrackRepository.OpenRecorded(
            counted: true, reports: 1, action: "default", eventID: "e-1", notifications: [])
        try same(OpenedView(deliveryID: 42, recorded: recorded))
        var other = recorded
        other.counted = false
        other.reports = 3
        other.action = "re\"ply\\ \n\u{1} /é"
        other.eventID = nil
        other.notifications = ["n-1", "n-2"]
        try same(OpenedView(deliveryID: Int64.max, recorded: other))
        let views = [
            ReceivedView(deliveryID: 1, status: 200, counted: true, reports: 1),
            ReceivedView(deliveryID: 0, status: 404),
            ReceivedView(deliveryID: -9_000_000_000, status: 403, counted: false, reports: nil),
            ReceivedView(deliveryID: Int64.min, status: 200, counted: nil, reports: 12_345_678_901),
        ]
        for view in views { try same(view) }
        try same(ReceivedViews(receipts: views))
        try same(ReceivedViews(receipts: []))
        // An error's body: what the encoder made of `{"error": {...}}`, with and without a field.
        for error in [
            APIError(.badRequest, code: "invalid_field", message: "re\"ply\\ \n\u{1}\u{1f} /é 🎉", field: "a.b[0]"),
            APIError(.notFound, code: "not_found", message: "no app \"x\""),
        ] {
            var object = ["code": error.code, "message": error.message]
            object["field"] = error.field
            let encoded = try JSONResponse.encoder.encode(["error": object])
            #expect(String(decoding: error.body, as: UTF8.self) == String(decoding: encoded, as: UTF8.self))
        }
    }

    @Test("whole numbers and UUIDs are written as String and uuidString write them")
    func numbersAndIDs() {
        var values: [Int64] = [0, 1, 9, 10, 99, 100, -1, -9, -10, Int64.max, Int64.min, Int64.min + 1]
        var power: Int64 = 1
        for _ in 0..<18 {
            power *= 10
            values += [power - 1, power, power + 1, -power, -(power - 1)]
        }
        for value in values {
            var json = JSONWriter()
            json.integer(value)
            #expect(String(decoding: json.bytes, as: UTF8.self) == String(value))
        }
        for id in [UUID(), UUID(), UUID(uuidString: "00000000-0000-0000-0000-000000000000")!] {
            var json = JSONWriter()
            json.uuid(id)
            #expect(String(decoding: json.bytes, as: UTF8.self) == "\"\(id.uuidString)\"")
        }
    }
}
