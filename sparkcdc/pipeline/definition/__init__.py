"""The pipeline's definition: the YAML file (Flink CDC 3.x's sections and keys), parsed into
plain typed values before anything runs, and what follows from it alone: Flink's keys mapped
to sparkcdc's (``flink_keys``), routes and transforms (``routing``), the column conversions
they ask for (``conversions``) and each target's sink options (``targets``). Nothing here
touches a server or Spark; the run and the commands read these values."""

from sparkcdc.pipeline.definition.model import (
    PipelineDef,
    PipelineSettings,
    RouteDef,
    SinkDef,
    SourceDef,
    TablePattern,
    TransformDef,
)
from sparkcdc.pipeline.definition.parse import (
    load_pipeline,
    parse_pipeline,
    parse_table_pattern,
    split_patterns,
)

__all__ = ["PipelineDef", "PipelineSettings", "RouteDef", "SinkDef", "SourceDef", "TablePattern",
           "TransformDef", "load_pipeline", "parse_pipeline", "parse_table_pattern",
           "split_patterns"]
