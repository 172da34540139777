"""Artemis address wildcards: which match strings cover an address, and in what precedence.

Theory of operation: an Artemis `<address-setting match="...">` (and a ringmq address setting
from TOML or a policy) names addresses with words split on `.`, where `#` stands for zero or
more words and `*` for exactly one. Several match strings can cover one address; their settings
are merged with the most specific first, each field taken from the first match that sets it.
This module owns both rules, so that broker.xml, TOML config and the queue engine order matches
the same way; it holds no state and imports nothing from ringmq.

The precedence is Artemis' own (`HierarchicalObjectRepository.MatchComparator`), applied to
the match strings as strings:

1. a match without `#` precedes one with `#`; between two with `#`, the longer string first;
2. otherwise a match without `*` precedes one with `*`; between two with `*`, compare word by
   word: at the first position where one has `*` and the other does not, the one without
   precedes (two `*` matches covering one address have as many words, since neither has `#`);
3. otherwise (and after a tie in 2) the shorter string first.

So for the address `a.b.c`, `a.b.c` precedes `a.*.c`, which precedes `a.*.*`, which precedes
`#.c` and `a.#`; between those two, the longer string would precede, and being equal in length
they keep the order they were given in (the sort is stable).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cmp_to_key
from typing import Final

__all__ = ["ANY_WORDS", "DELIMITER", "SINGLE_WORD", "matches", "most_specific_first"]

DELIMITER: Final = "."
ANY_WORDS: Final = "#"
SINGLE_WORD: Final = "*"


def matches(pattern: str, address: str) -> bool:
    """Whether the Artemis match string `pattern` covers `address`.

    `#` matches zero or more words (so `ring.#` covers `ring` itself), `*` exactly one word,
    any other word only itself.
    """
    return _words_match(pattern.split(DELIMITER), 0, address.split(DELIMITER), 0)


def _words_match(pattern: list[str], p: int, words: list[str], w: int) -> bool:
    while p < len(pattern):
        head = pattern[p]
        if head == ANY_WORDS:
            return any(_words_match(pattern, p + 1, words, i) for i in range(w, len(words) + 1))
        if w >= len(words) or (head != SINGLE_WORD and head != words[w]):
            return False
        p += 1
        w += 1
    return w == len(words)


def _compare(left: str, right: str) -> int:
    # Artemis MatchComparator: negative when `left` is the more specific match.
    left_any, right_any = ANY_WORDS in left, ANY_WORDS in right
    if left_any != right_any:
        return 1 if left_any else -1
    if left_any:
        return len(right) - len(left)
    left_single, right_single = SINGLE_WORD in left, SINGLE_WORD in right
    if left_single != right_single:
        return 1 if left_single else -1
    if left_single:
        left_words, right_words = left.split(DELIMITER), right.split(DELIMITER)
        for i, word in enumerate(left_words):
            if i >= len(right_words):
                return -1
            if (word == SINGLE_WORD) != (right_words[i] == SINGLE_WORD):
                return 1 if word == SINGLE_WORD else -1
    return len(left) - len(right)


_KEY: Final = cmp_to_key(_compare)


def most_specific_first(patterns: Iterable[str]) -> list[str]:
    """The match strings in Artemis precedence, the most specific first (a stable sort)."""
    return sorted(patterns, key=_KEY)
