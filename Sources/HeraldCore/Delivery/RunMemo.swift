/// A dictionary that keeps the last entry it answered beside it: a run of lookups of one key
/// (deliveries in id order come in runs of one notification and locale) is answered without
/// hashing the key. Values are made once per key, by `make`.
package struct RunMemo<Key: Hashable, Value> {
    private var values: [Key: Value] = [:]
    private var last: (key: Key, value: Value)?

    package init() {}

    package mutating func value(_ key: Key, _ make: () -> Value) -> Value {
        if let last, last.key == key { return last.value }
        let value =
            values[key]
            ?? {
                let value = make()
                values[key] = value
                return value
            }()
        last = (key, value)
        return value
    }
}
