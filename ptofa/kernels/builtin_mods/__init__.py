"""ptofa's built-in modifications (`kernels/mods.py`'s `Mod` objects), one module each: `softcap`, `alibi`.
`registry` turns a call's flash-attn arguments into them at the API's edge; the kernels, tile plans,
argument lists and launches see only `FAConfig.mods` / `BwdConfig.mods`. (No imports here: importing
one mod's module stays one module deep.)"""
