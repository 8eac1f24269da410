// Loaded on pages that embed ipywidgets, after require.js and before the widget embedder
// (see nb_ipywidgets_js in _config.yml). Everything it points at is served by the book itself.
(function () {
  "use strict";
  var here = new URL(".", document.currentScript.src).href; // .../_static/fusedrms_web/

  // 1. The theme's FontAwesome 6 script swaps <i class="fa ..."> for <svg>, which breaks the
  // Play widget's view (it later sets className on the <i> it created). "nest" keeps the <i> and
  // puts the svg inside it. Should an <i> keep its "fa" class, the widgets' own icon font draws
  // the glyph too: hide the svg then, so each icon shows once.
  window.FontAwesomeConfig = Object.assign(window.FontAwesomeConfig || {}, {autoReplaceSvg: "nest"});
  var style = document.createElement("style");
  style.textContent = ".jupyter-widgets i.fa > svg { display: none !important; }";
  document.head.appendChild(style);

  // 2. The embedder derives the URL of its icon fonts from its require.js module names: map them
  // to the local copy, or the fonts are fetched from the page's folder (404) or a CDN.
  window.requirejs.config({
    paths: {
      "@jupyter-widgets": here + "html-manager",
      "@jupyter-widgets/html-manager/dist": here + "html-manager"
    }
  });

  // 3. A widget module the embedder does not bundle would be fetched from this "CDN": point it
  // at the site itself, so a missing module is a visible local 404, never a request elsewhere.
  document.currentScript.setAttribute("data-jupyter-widgets-cdn", here + "no-cdn/");

  // 4. No kernel here: the inputs of controls marked live-only (fusedrms.viz.live_only) would
  // accept edits and then ignore them. Disable them as the embedder draws them.
  function disableLiveOnly(root) {
    var boxes = root.querySelectorAll ? root.querySelectorAll(".fusedrms-live-only") : [];
    for (var i = 0; i < boxes.length; i++) {
      boxes[i].setAttribute("inert", "");
      boxes[i].setAttribute("aria-disabled", "true");
      var inputs = boxes[i].querySelectorAll("input, select, textarea, button");
      for (var j = 0; j < inputs.length; j++) inputs[j].disabled = true;
    }
  }
  new MutationObserver(function () { disableLiveOnly(document); })
    .observe(document.documentElement, {childList: true, subtree: true});

  // 5. HTML widgets typeset their content with the MathJax 2 API (MathJax.Hub.Queue); the book
  // loads MathJax 3, which has no Hub. Give every MathJax object the page gets a small Hub that
  // forwards to MathJax 3 (MathJax 3 replaces window.MathJax when it loads, hence the setter).
  function addHub(mj) {
    if (!mj || typeof mj !== "object" || mj.Hub) return;
    Object.defineProperty(mj, "Hub", {
      enumerable: false,
      value: {
        Queue: function (command) {
          var element = Array.isArray(command) ? command[2] : undefined;
          var live = window.MathJax;
          if (live && live.startup && live.startup.promise && live.typesetPromise) {
            live.startup.promise
              .then(function () { return live.typesetPromise(element ? [element] : undefined); })
              .catch(function (err) { console.warn("MathJax typeset in a widget failed:", err); });
          } // before MathJax 3 has loaded, its own startup pass typesets the whole page
        }
      }
    });
  }
  var mathjax = window.MathJax;
  addHub(mathjax);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    enumerable: true,
    get: function () { return mathjax; },
    set: function (value) { mathjax = value; addHub(value); }
  });
})();
