// kube-queue console: live fragments and logs from Server-Sent Events (no framework, no build step).
"use strict";
(function () {
  function liveFragments() {
    document.querySelectorAll("[data-live]").forEach(function (el) {
      var state = document.getElementById("live-state");
      var source = new EventSource(el.dataset.live);
      source.addEventListener("update", function (e) {
        el.innerHTML = e.data;
        el.dataset.updates = String(Number(el.dataset.updates || "0") + 1);
        if (state) { state.textContent = "live · updated " + new Date().toLocaleTimeString(); state.classList.remove("problem"); }
      });
      source.addEventListener("problem", function (e) {
        if (state) { state.textContent = e.data; state.classList.add("problem"); }
      });
      source.onerror = function () {
        if (state) { state.textContent = "reconnecting…"; }
      };
    });
  }
  function liveLog() {
    var log = document.getElementById("log");
    if (!log || !log.dataset.stream) { return; }
    var status = document.getElementById("log-status");
    var source = new EventSource(log.dataset.stream);
    var say = function (text, bad) { if (status) { status.textContent = text; status.classList.toggle("problem", !!bad); } };
    source.addEventListener("status", function (e) { say(e.data, false); });
    source.addEventListener("line", function (e) {
      var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.appendChild(document.createTextNode(e.data + "\n"));
      if (atEnd) { log.scrollTop = log.scrollHeight; }
    });
    source.addEventListener("end", function (e) { say(e.data, false); source.close(); });
    source.addEventListener("problem", function (e) { say(e.data, true); source.close(); });
  }
  document.addEventListener("DOMContentLoaded", function () { liveFragments(); liveLog(); });
})();
