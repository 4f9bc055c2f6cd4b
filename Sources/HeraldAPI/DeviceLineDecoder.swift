import HeraldEngine

/// The import's fast path: one device line, `{"key": "string" | null, …}` with no escapes, read
/// straight from the bytes into a `DeviceBody` (JSONDecoder took ~8 µs a line, most of a
/// million-line import's parsing). Anything else — nested values, numbers, escapes, a repeated key,
/// bad UTF-8, broken JSON — returns nil and the line goes through JSONDecoder, which accepts or
/// refuses it with the field named, exactly as before.
package enum DeviceLineDecoder {
    package static func decode(_ bytes: UnsafeRawBufferPointer) -> DeviceBody? {
        var body = DeviceBody()
        var seen: UInt16 = 0
        let flat = FlatJSON.visit(bytes) { key, value in
            guard let text = FlatJSON.optionalText(value, in: bytes) else { return false }
            if let field = Field(key, in: bytes) {
                guard seen & field.bit == 0 else { return false }
                seen |= field.bit
                field.assign(text, to: &body)
            }
            return true
        }
        return flat ? body : nil
    }

    /// The keys a device line may carry with string values (`DeviceBody.CodingKeys`); others
    /// are ignored, and a line whose values are not all strings (a web push line's `keys`)
    /// goes to the JSON decoder.
    private enum Field: Int, CaseIterable {
        case deviceID, userID, platform, token, environment, name, model, locale, timeZone, appVersion,
            authorizationStatus, endpoint

        var key: StaticString {
            switch self {
            case .deviceID: "device_id"
            case .userID: "user_id"
            case .platform: "platform"
            case .token: "token"
            case .environment: "environment"
            case .name: "name"
            case .model: "model"
            case .locale: "locale"
            case .timeZone: "time_zone"
            case .appVersion: "app_version"
            case .authorizationStatus: "authorization_status"
            case .endpoint: "endpoint"
            }
        }

        var bit: UInt16 { 1 << UInt16(rawValue) }

        init?(_ range: Range<Int>, in bytes: UnsafeRawBufferPointer) {
            let key = UnsafeRawBufferPointer(rebasing: bytes[range])
            for field in Self.allCases {
                let name = field.key
                guard name.utf8CodeUnitCount == key.count else { continue }
                if key.elementsEqual(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)) {
                    self = field
                    return
                }
            }
            return nil
        }

        func assign(_ value: String?, to body: inout DeviceBody) {
            switch self {
            case .deviceID: body.deviceID = value
            case .userID: body.userID = value
            case .platform: body.platform = value
            case .token: body.token = value
            case .environment: body.environment = value
            case .name: body.name = value
            case .model: body.model = value
            case .locale: body.locale = value
            case .timeZone: body.timeZone = value
            case .appVersion: body.appVersion = value
            case .authorizationStatus: body.authorizationStatus = value
            case .endpoint: body.endpoint = value
            }
        }
    }
}
