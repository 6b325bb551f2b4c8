"""The graph IR and its MXNet JSON reader/writer."""
from mxcc.graph.ir import VARIABLE, FusedGroup, Graph, Node, Ref
from mxcc.graph.json_io import dump_json, graph_from_dict, graph_to_dict, load_json

__all__ = ["VARIABLE", "FusedGroup", "Graph", "Node", "Ref", "dump_json", "graph_from_dict",
           "graph_to_dict", "load_json"]
