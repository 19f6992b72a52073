"""Master/slave replication as RocketMQ 4.x classic HA does it (DESIGN.md section 2).

- ``wire``: the two message shapes of the HA stream
- ``service``: the master side (HAService, one HAConnection per slave, GroupTransferService)
- ``client``: the slave side (HAClient)
"""
