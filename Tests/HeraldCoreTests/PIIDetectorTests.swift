import HeraldCore
import Testing

/// The built-in personal-data detectors: what they find, and that no text makes them slow.
@Suite("PII detectors")
struct PIIDetectorTests {
    @Test("e-mail addresses, phone numbers, card numbers and street addresses are found; look-alikes are not")
    func findings() {
        for text in ["write to ana.b+x@example.co.uk today", "A@B.IO", "mail me: x_y%z@sub.mail2.example.org."] {
            #expect(PIIDetector.email.matches(text), "\(text)")
        }
        for text in ["ana@localhost", "@example.com", "a@b.c", "no at sign here"] {
            #expect(!PIIDetector.email.matches(text), "\(text)")
        }
        for text in ["call +33 6 12 34 56 78 now", "(555) 123-4567 ext", "555.123.4567 and"] {
            #expect(PIIDetector.phone.matches(text), "\(text)")
        }
        for text in ["call 555-123-4567.", "tel:+1-555-123-4567", "+44 20 7946 0958"] {
            #expect(PIIDetector.phone.matches(text), "\(text)")
        }
        for text in ["order 123456789x", "year 2026", "v2.1234567890123", "id_5551234567"] {
            #expect(!PIIDetector.phone.matches(text), "\(text)")
        }
        // UUIDs whose groups are all digits (twelve digits in a row, or sixteen that pass Luhn's
        // check), in a thread id, a deep link and alone: identifiers, not personal data.
        for text in [
            "library-abcdef12-3456-4789-8901-abcdef123456",
            "lucid://library/0b1c2d3e-4f50-4a6b-8c7d-123456789012/comments",
            "0b1c2d3e-4f50-4a6b-8c7d-123456789012", "e0b1c2d3-4f50-4a6b-8123-123456789010",
        ] {
            for detector in PIIDetector.builtIn {
                #expect(!detector.matches(text), "\(detector.name): \(text)")
            }
        }
        #expect(PIIDetector.cardNumber.matches("card 4111 1111 1111 1111 expires"))
        #expect(PIIDetector.cardNumber.matches("card:4111-1111-1111-1111"))
        #expect(!PIIDetector.cardNumber.matches("card 4111 1111 1111 1112 expires"))
        #expect(!PIIDetector.cardNumber.matches("ab4111111111111111"))
        #expect(!PIIDetector.cardNumber.matches("ref-4111111111111111-x"))
        #expect(PIIDetector.streetAddress.matches("meet at 221 Baker Street tonight"))
        #expect(PIIDetector.streetAddress.matches("10 Downing St. London"))
        #expect(!PIIDetector.streetAddress.matches("we walked 5 miles"))
    }

    /// Inputs that make backtracking patterns retry a long run from each of its positions (the
    /// e-mail pattern's unbounded local part was quadratic: 64 KB of `a` is about two billion
    /// steps). Every detector must get through each of them: with quadratic patterns this test
    /// would not finish within CI's time.
    @Test(
        "64 KB of hostile text (runs of local-part characters, digits and separators, words) takes every detector one pass"
    )
    func linearTime() {
        let size = 64 * 1024
        let hostile = [
            String(repeating: "a", count: size), String(repeating: "a.", count: size / 2),
            String(repeating: "a@", count: size / 2),
            "a@" + String(repeating: "b", count: size), "a@" + String(repeating: "b.", count: size / 2) + "1",
            String(repeating: "1 ", count: size / 2) + "x", String(repeating: "1", count: size) + ".",
            String(repeating: "1-", count: size / 2),
            "1 " + String(repeating: "Abc ", count: size / 4), String(repeating: "1 a ", count: size / 4),
        ]
        for text in hostile {
            for detector in PIIDetector.builtIn {
                _ = detector.matches(text)
            }
        }
        #expect(!PIIDetector.email.matches(String(repeating: "a", count: size)))
        #expect(!PIIDetector.phone.matches(String(repeating: "1 ", count: size / 2) + "x"))
    }
}
