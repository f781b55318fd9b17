"""The sink's transactional writes (`transactional=true`, docs/spark.md, "Transactions").

Tasks send their rows as half messages (sending.py) and return their handles; the driver's
`commit` writes the batch's record (record.py) before it ends any half message, then commits them
(commit.py); every producer of the group answers the brokers' checks from the records (listener.py).
"""
