"""The commit log and what it is made of: segment files of records (`commitlog`), the framing of
one record (`record`) and what its payload holds (`stored`), where records start (`record_positions`,
`granules`), pulls of rows spread over many records (`scattered`), the checkpoint, a full disk
(`disk_space`), and the helpers the consume queues and the index share with it: fsyncing new
directories (`durability`) and growable numpy arrays (`growable`). It imports no other part of the
store but its settings: the writer, the duplicate window and the queues build on it."""
