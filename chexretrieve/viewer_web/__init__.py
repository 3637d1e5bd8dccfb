"""The OHIF Viewer served by the app, and its read-only DICOMweb endpoint (no Gradio here).

- :mod:`~chexretrieve.viewer_web.ohif`: the installed OHIF ``dist/`` under ``/viewer`` with our
  page and ``app-config.js``; :mod:`~chexretrieve.viewer_web.install` installs it (``make setup``);
- :mod:`~chexretrieve.viewer_web.dicomweb`: QIDO-RS / WADO-RS over the store's files;
- :mod:`~chexretrieve.viewer_web.access`: grants from searches, viewer sessions, ``may_see_phi``;
- :mod:`~chexretrieve.viewer_web.gate`: the ASGI middleware in front of the Gradio server.
The Gradio side (links on results, the login's user) is :mod:`chexretrieve.ui.viewer_links`.
"""
