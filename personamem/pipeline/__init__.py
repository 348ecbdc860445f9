"""The personalization pipeline: one config, one object, from a user's query to LLM-ready context."""

from personamem.pipeline.config import PipelineConfig, load_pipeline
from personamem.pipeline.pipeline import Context, Hits, Pipeline

__all__ = ["Context", "Hits", "Pipeline", "PipelineConfig", "load_pipeline"]
