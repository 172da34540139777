"""The shard link: how the shards of one broker forward publishes and consumers (sans-IO).

`codec` (frames), `origin` (the side that holds the client's connection), `owner` (the side
that owns the queues). docs/dev/shards.md places the link in the design of several shards.
"""
