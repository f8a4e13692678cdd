"""The main job (`data.kind='online'`): `stages` runs behaviour cloning -> RL -> evaluation and the report,
each stage resuming where it stopped; `online` is online RL as a source of the one training loop; `vl_bc`
builds and feeds a vision-language policy for BC; `config` holds the `rl`, `bc` and `report` sections."""
