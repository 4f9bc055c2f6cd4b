public import Foundation

/// Reports a Live Activity's tokens to Herald as ActivityKit hands them over: push-to-start
/// tokens per `ActivityAttributes` type (so the server can start activities), and each
/// activity's update tokens as they rotate (so the server can update and end it). Each token
/// goes through the client's outbox like a registration (kept across launches, retried, a
/// rotation replacing a report still waiting); a token already acknowledged is not sent again.
///
/// The streams are ActivityKit's (`Activity<T>.pushToStartTokenUpdates`,
/// `activity.pushTokenUpdates`; the adapter in `HeraldKit/Apple` feeds them) or any sequence of
/// raw token bytes, which is how it is tested.
public struct ActivityTokens: Sendable {
    public let client: HeraldClient

    public init(client: HeraldClient) {
        self.client = client
    }

    /// Reports every push-to-start token `tokens` yields for `attributesType`, until the
    /// sequence ends or the task is cancelled.
    public func followPushToStart<Tokens: AsyncSequence>(attributesType: String, _ tokens: Tokens) async
    where Tokens.Element == Data {
        do {
            for try await token in tokens {
                await client.reportPushToStartToken(token, attributesType: attributesType)
            }
        } catch {
            await client.logActivityTokens("the push-to-start tokens of \(attributesType) ended: \(error)")
        }
    }

    /// Reports every update token `tokens` yields for the activity `activityID` (rotations
    /// included), until the sequence ends (the activity ended) or the task is cancelled.
    public func followActivity<Tokens: AsyncSequence>(
        _ activityID: String, attributesType: String? = nil, _ tokens: Tokens
    ) async where Tokens.Element == Data {
        do {
            for try await token in tokens {
                await client.reportActivityToken(token, activityID: activityID, attributesType: attributesType)
            }
        } catch {
            await client.logActivityTokens("the update tokens of activity \(activityID) ended: \(error)")
        }
    }
}

extension HeraldClient {
    func logActivityTokens(_ message: String) {
        logger.log(.warning, "HeraldKit: " + message)
    }
}
