"""Pipelines: a Flink CDC 3.x-style YAML file describing a whole sync, run on Spark.

    from sparkcdc.pipeline import load_pipeline, Runner
    defn = load_pipeline("pipeline.yaml")          # plain definitions; errors name key and line
    Runner(defn, until_caught_up=True).run()

See docs/pipelines.md.
"""

from sparkcdc.pipeline.definition import PipelineDef, load_pipeline, parse_pipeline

__all__ = ["PipelineDef", "Runner", "load_pipeline", "parse_pipeline"]


def __getattr__(name):
    if name == "Runner":
        from sparkcdc.pipeline.run.loop import Runner

        return Runner
    raise AttributeError(name)
