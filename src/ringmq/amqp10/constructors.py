"""AMQP 1.0 constructor codes (spec part 1, 1.6): the format code byte before each value."""

from __future__ import annotations

from typing import Final

NULL: Final = 0x40
TRUE: Final = 0x41
FALSE: Final = 0x42
BOOLEAN: Final = 0x56
UBYTE: Final = 0x50
USHORT: Final = 0x60
UINT: Final = 0x70
SMALLUINT: Final = 0x52
UINT0: Final = 0x43
ULONG: Final = 0x80
SMALLULONG: Final = 0x53
ULONG0: Final = 0x44
BYTE: Final = 0x51
SHORT: Final = 0x61
INT: Final = 0x71
SMALLINT: Final = 0x54
LONG: Final = 0x81
SMALLLONG: Final = 0x55
FLOAT: Final = 0x72
DOUBLE: Final = 0x82
DECIMAL32: Final = 0x74
DECIMAL64: Final = 0x84
DECIMAL128: Final = 0x94
CHAR: Final = 0x73
TIMESTAMP: Final = 0x83
UUID: Final = 0x98
VBIN8: Final = 0xA0
VBIN32: Final = 0xB0
STR8: Final = 0xA1
STR32: Final = 0xB1
SYM8: Final = 0xA3
SYM32: Final = 0xB3
LIST0: Final = 0x45
LIST8: Final = 0xC0
LIST32: Final = 0xD0
MAP8: Final = 0xC1
MAP32: Final = 0xD1
ARRAY8: Final = 0xE0
ARRAY32: Final = 0xF0
DESCRIBED: Final = 0x00
