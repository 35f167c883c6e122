"""The process machinery the stages run on: worker pools, the sandbox's parent side and its members, the device
gate and host-wide lease, and whose work is on the device."""
