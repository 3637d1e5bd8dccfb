"""Case search: query by case or image, one finding, one geometry (no UI code here).

``SearchService`` (service.py) does the work over a ``Gallery`` (gallery.py) and an anchor provider;
``open_search_service`` (application.py) wires it to the store, an encoder and the anchor files.
"""
