"""The shard link's owner side on a running broker (internal, experimental).

`shardlink_handler(secret)` is the `HandlerFactory` of the shard link's listener
(`--shard-link-port`): each accepted socket is one link from an origin shard, served by
`OwnerLinkHandler` over the sans-IO `ringmq.shardlink.owner.OwnerSession`; the links that
follow this shard's definitions share one `Followers`. What the shards of
one broker use (docs/dev/shards.md); not for clients.
"""

from __future__ import annotations

from ringmq.adapters.handler import HandlerContext, HandlerFactory
from ringmq.adapters.shardlink.definitions import Followers
from ringmq.adapters.shardlink.handler import LINK_USER, LINK_VHOST, OwnerLinkHandler

__all__ = ["LINK_USER", "LINK_VHOST", "OwnerLinkHandler", "shardlink_handler"]


def shardlink_handler(secret: bytes, shard: int = 0) -> HandlerFactory:
    """The factory of owner-side link handlers proving `secret`, for shard index `shard`."""
    if not secret:
        raise ValueError("the shard link needs a secret")
    followers: list[Followers] = []  # one for the broker, made with the first link

    def make(ctx: HandlerContext) -> OwnerLinkHandler:
        if not followers:
            followers.append(Followers(ctx.broker))
        return OwnerLinkHandler(ctx, secret, shard, followers[0])

    return make
