/// Stamped by `scripts/release.sh` while it builds (and put back afterwards): the commit a
/// release binary was built from. nil in any other build.
enum BuildInfo {
    static let commit: String? = nil
}
