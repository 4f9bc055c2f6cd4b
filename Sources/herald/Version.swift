/// What `herald --version` prints: the release and the commit it was built from.
enum HeraldVersion {
    /// The release; `scripts/release.sh` names its artifacts after it.
    static let release = "0.1.0"

    /// `0.1.0 (commit 1a2b3c4d5e6f)`, or `(development build)` when built without
    /// `scripts/release.sh`.
    static var description: String { "\(release) (\(BuildInfo.commit.map { "commit \($0)" } ?? "development build"))" }
}
