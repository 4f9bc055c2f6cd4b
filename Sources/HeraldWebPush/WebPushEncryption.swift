package import Crypto
package import Foundation

/// RFC 8291 message encryption for Web Push: the `aes128gcm` content coding (RFC 8188) with
/// one record, keyed by ECDH between a fresh sender key and the subscription's `p256dh` key,
/// mixed with its `auth` secret.
package enum WebPushEncryption {
    /// Salt (16), record size (4), key id length (1), the sender's public key (65).
    package static let headerSize = 86
    /// The record size written in the header: one record holds the whole message.
    package static let recordSize = 4_096
    /// What fits a 4,096-byte body once the header, the padding delimiter and the tag are paid for.
    package static let maximumPlaintext = recordSize - headerSize - 1 - 16

    /// Why a message cannot be encrypted or decrypted.
    package enum Failure: Error, Equatable, CustomStringConvertible {
        /// `p256dh` is not a 65-byte uncompressed point on P-256.
        case invalidPublicKey
        /// `auth` is not 16 bytes.
        case invalidAuthSecret
        case plaintextTooLarge(bytes: Int)
        /// A body that is not one aes128gcm record for a P-256 key (what is wrong, named).
        case malformed(String)
        /// The tag does not match: another key, another secret, or altered bytes.
        case decryptionFailed

        package var description: String {
            switch self {
            case .invalidPublicKey: "p256dh is not a 65-byte uncompressed P-256 point"
            case .invalidAuthSecret: "auth is not 16 bytes"
            case .plaintextTooLarge(let bytes): "the message is \(bytes) bytes; at most \(maximumPlaintext) fit"
            case .malformed(let what): "not an aes128gcm message: \(what)"
            case .decryptionFailed: "the message does not decrypt with this subscription's keys"
            }
        }
    }

    /// The subscription's public key, checked: 65 bytes, uncompressed, on the curve.
    package static func publicKey(_ p256dh: Data) throws(Failure) -> P256.KeyAgreement.PublicKey {
        guard p256dh.count == 65, p256dh.first == 0x04,
            let key = try? P256.KeyAgreement.PublicKey(x963Representation: p256dh)
        else { throw .invalidPublicKey }
        return key
    }

    /// Encrypts `plaintext` for a subscription. `senderKey` and `salt` are fresh for every
    /// message unless a test fixes them (RFC 8291 Appendix A); `padding` zero bytes may hide
    /// the length.
    package static func encrypt(
        _ plaintext: some DataProtocol, p256dh: Data, auth: Data,
        senderKey: P256.KeyAgreement.PrivateKey = P256.KeyAgreement.PrivateKey(),
        salt: Data = Data(SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) }), padding: Int = 0
    ) throws(Failure) -> Data {
        let receiver = try publicKey(p256dh)
        guard auth.count == 16 else { throw .invalidAuthSecret }
        let size = plaintext.count + max(0, padding)
        guard size <= maximumPlaintext else { throw .plaintextTooLarge(bytes: plaintext.count) }
        let senderPublic = senderKey.publicKey.x963Representation
        let (key, nonce) = try keys(
            ourKey: senderKey, theirKey: receiver, receiverPublic: p256dh, senderPublic: senderPublic, auth: auth,
            salt: salt)
        var record = Data(plaintext)
        record.append(0x02)  // the last (and only) record's delimiter
        if padding > 0 { record.append(Data(count: padding)) }
        guard let sealed = try? AES.GCM.seal(record, using: key, nonce: nonce) else {
            throw .malformed("the record could not be sealed")
        }
        var body = Data(capacity: headerSize + record.count + 16)
        body.append(salt)
        withUnsafeBytes(of: UInt32(recordSize).bigEndian) { body.append(contentsOf: $0) }
        body.append(UInt8(senderPublic.count))
        body.append(senderPublic)
        body.append(sealed.ciphertext)
        body.append(sealed.tag)
        return body
    }

    /// Decrypts a message with the subscription's private key and `auth` secret: what a
    /// browser does on receipt (the simulator's half; tests use it for round trips).
    package static func decrypt(_ body: Data, privateKey: P256.KeyAgreement.PrivateKey, auth: Data) throws(Failure)
        -> Data
    {
        let bytes = [UInt8](body)
        guard auth.count == 16 else { throw .invalidAuthSecret }
        guard bytes.count >= 21 else { throw .malformed("\(bytes.count) bytes is shorter than the header") }
        let salt = Data(bytes[0..<16])
        let recordSize = bytes[16..<20].reduce(0) { $0 << 8 | Int($1) }
        let idLength = Int(bytes[20])
        guard idLength == 65 else { throw .malformed("the key id is \(idLength) bytes, not a 65-byte P-256 key") }
        guard bytes.count >= 21 + idLength + 17 else { throw .malformed("no record after the header") }
        let senderPublic = Data(bytes[21..<(21 + idLength)])
        let sealed = bytes[(21 + idLength)...]
        guard recordSize >= 18, sealed.count <= recordSize else {
            throw .malformed("one record of at most the record size \(recordSize) is expected")
        }
        guard let sender = try? P256.KeyAgreement.PublicKey(x963Representation: senderPublic) else {
            throw .malformed("the key id is not a P-256 point")
        }
        let (key, nonce) = try keys(
            ourKey: privateKey, theirKey: sender, receiverPublic: privateKey.publicKey.x963Representation,
            senderPublic: senderPublic, auth: auth, salt: salt)
        let ciphertext = Data(sealed.dropLast(16))
        let tag = Data(sealed.suffix(16))
        guard let box = try? AES.GCM.SealedBox(nonce: nonce, ciphertext: ciphertext, tag: tag),
            let record = try? AES.GCM.open(box, using: key)
        else { throw .decryptionFailed }
        // Padding is zeros after the delimiter; the only record's delimiter is 2.
        guard let end = record.lastIndex(where: { $0 != 0 }), record[end] == 0x02 else {
            throw .malformed("the record has no last-record delimiter")
        }
        return Data(record[record.startIndex..<end])
    }

    /// The content-encryption key and nonce (RFC 8291 §3.4, RFC 8188 §2.2–2.3).
    static func keys(
        ourKey: P256.KeyAgreement.PrivateKey, theirKey: P256.KeyAgreement.PublicKey, receiverPublic: Data,
        senderPublic: Data, auth: Data, salt: Data
    ) throws(Failure) -> (SymmetricKey, AES.GCM.Nonce) {
        guard salt.count == 16 else { throw .malformed("the salt is \(salt.count) bytes, not 16") }
        guard let shared = try? ourKey.sharedSecretFromKeyAgreement(with: theirKey) else {
            throw .invalidPublicKey
        }
        var keyInfo = Data("WebPush: info".utf8)
        keyInfo.append(0)
        keyInfo.append(receiverPublic)
        keyInfo.append(senderPublic)
        let inputKey = shared.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: auth, sharedInfo: keyInfo, outputByteCount: 32)
        let pseudoRandomKey = HKDF<SHA256>.extract(inputKeyMaterial: inputKey, salt: salt)
        let contentKey = HKDF<SHA256>.expand(
            pseudoRandomKey: pseudoRandomKey, info: Data("Content-Encoding: aes128gcm\0".utf8), outputByteCount: 16)
        let nonceBytes = HKDF<SHA256>.expand(
            pseudoRandomKey: pseudoRandomKey, info: Data("Content-Encoding: nonce\0".utf8), outputByteCount: 12)
        guard let nonce = try? AES.GCM.Nonce(data: nonceBytes.withUnsafeBytes { Data($0) }) else {
            throw .malformed("the nonce could not be made")
        }
        return (contentKey, nonce)
    }
}
