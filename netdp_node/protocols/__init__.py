"""The sans-IO engine interface (base.py): messages in, actions out. The engines themselves live
with their algorithm in `netdp_node.algorithms`."""
