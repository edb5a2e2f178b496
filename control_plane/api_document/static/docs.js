// Starts Swagger UI on the API docs page (control_plane/api_document/docs_page.py).
// A file of its own, not an inline script: the page's CSP allows scripts from this origin only.
"use strict";
window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: new URL(root.dataset.document, window.location.href).href,
    domNode: root,
    deepLinking: true,
    // Swagger UI would send the document to its public validator: nothing leaves this origin.
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
