import Crypto
import Foundation
import HeraldCore
import HeraldWebPush
import Testing

/// Web Push's encryption and VAPID against the RFCs' own examples: RFC 8291 Appendix A's
/// message byte for byte, RFC 8292 §2.4's JWT verified with its key.
@Suite("Web Push crypto")
struct WebPushCryptoTests {
    // RFC 8291 Appendix A.
    static let plaintext = "When I grow up, I want to be a watermelon"
    static let senderPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let senderPublic = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    static let receiverPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    static let receiverPublic =
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"
    static let body =
        "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"

    static func bytes(_ text: String) throws -> Data { try #require(Base64URL.decode(text)) }

    @Test("RFC 8291 Appendix A: the sender's fixed key and salt give the RFC's message byte for byte")
    func rfc8291Encrypt() throws {
        let sender = try P256.KeyAgreement.PrivateKey(rawRepresentation: Self.bytes(Self.senderPrivate))
        #expect(Base64URL.encode(sender.publicKey.x963Representation) == Self.senderPublic)
        let message = try WebPushEncryption.encrypt(
            Data(Self.plaintext.utf8), p256dh: Self.bytes(Self.receiverPublic), auth: Self.bytes(Self.auth),
            senderKey: sender, salt: Self.bytes(Self.salt))
        #expect(Base64URL.encode(message) == Self.body)
    }

    @Test("RFC 8291 Appendix A: the receiver's key opens the RFC's message; another key, secret or byte does not")
    func rfc8291Decrypt() throws {
        let receiver = try P256.KeyAgreement.PrivateKey(rawRepresentation: Self.bytes(Self.receiverPrivate))
        #expect(Base64URL.encode(receiver.publicKey.x963Representation) == Self.receiverPublic)
        let body = try Self.bytes(Self.body)
        let opened = try WebPushEncryption.decrypt(body, privateKey: receiver, auth: Self.bytes(Self.auth))
        #expect(String(decoding: opened, as: UTF8.self) == Self.plaintext)
        #expect(throws: WebPushEncryption.Failure.decryptionFailed) {
            try WebPushEncryption.decrypt(body, privateKey: P256.KeyAgreement.PrivateKey(), auth: Self.bytes(Self.auth))
        }
        #expect(throws: WebPushEncryption.Failure.decryptionFailed) {
            try WebPushEncryption.decrypt(body, privateKey: receiver, auth: Data(repeating: 7, count: 16))
        }
        var altered = body
        altered[altered.count - 20] ^= 1
        #expect(throws: WebPushEncryption.Failure.decryptionFailed) {
            try WebPushEncryption.decrypt(altered, privateKey: receiver, auth: Self.bytes(Self.auth))
        }
        // Truncated and foreign bodies are named, never trapped on.
        for cut in [0, 10, 20, 21, 86, 100] {
            #expect(throws: WebPushEncryption.Failure.self) {
                try WebPushEncryption.decrypt(body.prefix(cut), privateKey: receiver, auth: Self.bytes(Self.auth))
            }
        }
    }

    @Test("fresh keys round trip, padding included; sizes and keys are checked before anything is sealed")
    func roundTripAndLimits() throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let auth = Data((0..<16).map { UInt8($0) })
        let p256dh = receiver.publicKey.x963Representation
        let text = Data(String(repeating: "é", count: 900).utf8)
        let first = try WebPushEncryption.encrypt(text, p256dh: p256dh, auth: auth, padding: 100)
        let second = try WebPushEncryption.encrypt(text, p256dh: p256dh, auth: auth, padding: 100)
        #expect(first != second, "a fresh sender key and salt for every message")
        #expect(first.count == WebPushEncryption.headerSize + text.count + 1 + 100 + 16)
        #expect(try WebPushEncryption.decrypt(first, privateKey: receiver, auth: auth) == text)
        let largest = Data(repeating: 0x61, count: WebPushEncryption.maximumPlaintext)
        #expect(WebPushEncryption.maximumPlaintext == 3_993)
        #expect(try WebPushEncryption.encrypt(largest, p256dh: p256dh, auth: auth).count == 4_096)
        #expect(throws: WebPushEncryption.Failure.plaintextTooLarge(bytes: 3_994)) {
            try WebPushEncryption.encrypt(largest + Data([0x61]), p256dh: p256dh, auth: auth)
        }
        #expect(throws: WebPushEncryption.Failure.invalidAuthSecret) {
            try WebPushEncryption.encrypt(text, p256dh: p256dh, auth: auth.prefix(15))
        }
        var offCurve = p256dh
        offCurve[40] ^= 0xFF
        for bad in [p256dh.prefix(64), receiver.publicKey.compressedRepresentation, offCurve, Data(count: 65)] {
            #expect(throws: WebPushEncryption.Failure.invalidPublicKey) {
                try WebPushEncryption.encrypt(text, p256dh: bad, auth: auth)
            }
        }
    }

    // RFC 8292 §2.4.
    static let jwt =
        "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9.eyJhdWQiOiJodHRwczovL3B1c2guZXhhbXBsZS5uZXQiLCJleHAiOjE0NTM1MjM3NjgsInN1YiI6Im1haWx0bzpwdXNoQGV4YW1wbGUuY29tIn0.i3CYb7t4xfxCDquptFOepC9GAu_HLGkMlMuCGSK2rpiUfnK9ojFwDXb1JrErtmysazNjjvW2L9OkSSHzvoD1oA"
    static let vapidKey = "BA1Hxzyi1RUM1b5wjxsn7nGxAszw2u61m164i3MrAIxHF6YK5h4SDYic-dRuU_RCPCfA5aq9ojSwk5Y2EmClBPs"

    @Test("RFC 8292 §2.4: the example's JWT verifies with its k; its claims read back; each rule refuses by name")
    func rfc8292() throws {
        let header = "vapid t=\(Self.jwt), k=\(Self.vapidKey)"
        let (claims, key) = try VAPID.verify(header, audience: "https://push.example.net", now: 1_453_520_000)
        #expect(
            claims
                == VAPID.Claims(
                    audience: "https://push.example.net", expiration: 1_453_523_768, subject: "mailto:push@example.com")
        )
        #expect(Base64URL.encode(key) == Self.vapidKey)
        #expect(throws: VAPID.Refusal.audience("https://push.example.net")) {
            try VAPID.verify(header, audience: "https://web.push.apple.com", now: 1_453_520_000)
        }
        #expect(throws: VAPID.Refusal.expired) {
            try VAPID.verify(header, audience: "https://push.example.net", now: 1_453_523_768)
        }
        #expect(throws: VAPID.Refusal.tooLong) {
            try VAPID.verify(header, audience: "https://push.example.net", now: 1_453_400_000)
        }
        #expect(throws: VAPID.Refusal.wrongKey) {
            try VAPID.verify(
                header, audience: "https://push.example.net", now: 1_453_520_000,
                expectedKey: P256.Signing.PrivateKey().publicKey.x963Representation)
        }
        let otherKey = VAPID.publicKeyText(P256.Signing.PrivateKey().publicKey)
        #expect(throws: VAPID.Refusal.badSignature) {
            try VAPID.verify(
                "vapid t=\(Self.jwt), k=\(otherKey)", audience: "https://push.example.net", now: 1_453_520_000)
        }
        for bad in [nil, "", "Bearer x", "vapid t=a.b", "vapid t=\(Self.jwt)", "vapid t=x.y.z, k=\(Self.vapidKey)"] {
            #expect(throws: VAPID.Refusal.self) {
                try VAPID.verify(bad, audience: "https://push.example.net", now: 1_453_520_000)
            }
        }
    }

    @Test("a header Herald signs verifies; Safari's subject rules; the audience is the endpoint's origin")
    func signAndRules() throws {
        let key = P256.Signing.PrivateKey()
        let endpoint = "https://web.push.apple.com/QGuQyavXutnMH/xyz?x=1"
        let audience = try #require(VAPID.audience(of: endpoint))
        #expect(audience == "https://web.push.apple.com")
        #expect(VAPID.audience(of: "https://Push.Example.net:8443/a") == "https://push.example.net:8443")
        #expect(VAPID.audience(of: "http://push.example.net/a") == nil)
        #expect(VAPID.audience(of: "not a url") == nil)
        let header = try VAPID.authorization(
            key: key, audience: audience, subject: "mailto:ops@example.com", expiration: 1_800_000_000)
        let (claims, signer) = try VAPID.verify(
            header, audience: audience, now: 1_800_000_000 - 3_600, expectedKey: key.publicKey.x963Representation)
        #expect(claims.subject == "mailto:ops@example.com" && claims.expiration == 1_800_000_000)
        #expect(signer == key.publicKey.x963Representation)
        for good in ["mailto:ops@example.com", "https://example.com/contact"] {
            #expect(VAPID.isValidSubject(good), "\(good)")
        }
        for bad in ["mailto: <ops@example.com>", "mailto:ops", "https://localhost", "ops@example.com", "http://x.com"] {
            #expect(!VAPID.isValidSubject(bad), "\(bad)")
        }
    }
}
