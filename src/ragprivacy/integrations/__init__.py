"""Drop-in private retrievers for the frameworks RAG is built with.

* :mod:`ragprivacy.integrations.langchain` — ``PrivateRetriever``, a langchain-core
  ``BaseRetriever`` (the ``langchain`` extra);
* :mod:`ragprivacy.integrations.llama_index` — ``PrivateRetriever``, a LlamaIndex
  ``BaseRetriever`` (the ``llamaindex`` extra).

Both wrap a :class:`PrivateSource`: one of our private retrievers in this process
(:class:`LibrarySource`) or a running ragprivacy service (:class:`ServiceSource`). This
package imports neither framework; each adapter module imports its own.
"""

from ragprivacy.integrations._source import (
    LibrarySource,
    PrivateSource,
    RetrievedDocument,
    ServiceSource,
)

__all__ = ["LibrarySource", "PrivateSource", "RetrievedDocument", "ServiceSource"]
