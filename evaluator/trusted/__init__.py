"""The trusted workers: the referee (the reference, every input, the comparison, the reference's timings, the
device-idle probe) and the precompiled-header build. They never import candidate code."""
