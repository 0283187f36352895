// gpufleet dashboard: "/" focuses the host search (unless typing in a field); Escape leaves it.
document.addEventListener("keydown", function (e) {
  var el = document.activeElement;
  var typing = el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT");
  var box = document.getElementById("search");
  if (e.key === "/" && !typing && box && !e.ctrlKey && !e.metaKey && !e.altKey) {
    e.preventDefault();
    box.focus();
    box.select();
  } else if (e.key === "Escape" && el === box) {
    box.blur();
  }
});
