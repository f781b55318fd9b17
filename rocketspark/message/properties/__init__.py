"""Message properties: the `key 0x01 value 0x02` string codec and the well-known keys (`codec`), and
whole columns of them parsed and built (`columns`)."""
