/* Count down the TTL of each held lock shown on the page, once a second.
 *
 * Each element with a data-ttl attribute (seconds, as read when the page was built) shows
 * the lease left, formatted as the server formats it (admin.format_duration), and
 * "expired" once the lease has ended. No dependencies; works with several tables per page.
 */
(function () {
    "use strict";

    function format(seconds) {
        var whole = Math.max(0, Math.floor(seconds));
        if (whole < 60) {
            return whole + " s";
        }
        if (whole < 3600) {
            return Math.floor(whole / 60) + " min " + String(whole % 60).padStart(2, "0") + " s";
        }
        return Math.floor(whole / 3600) + " h " +
            String(Math.floor(whole % 3600 / 60)).padStart(2, "0") + " min";
    }

    function start() {
        var loaded = performance.now();
        var cells = Array.prototype.slice.call(document.querySelectorAll("[data-ttl]"));
        var ttls = cells.map(function (cell) { return parseFloat(cell.getAttribute("data-ttl")); });

        function tick() {
            var elapsed = (performance.now() - loaded) / 1000;
            cells.forEach(function (cell, index) {
                if (isNaN(ttls[index])) {
                    return;
                }
                var left = ttls[index] - elapsed;
                if (left > 0) {
                    cell.textContent = format(Math.ceil(left));
                } else if (!cell.classList.contains("lock-expired")) {
                    cell.textContent = "expired";
                    cell.classList.add("lock-expired");
                }
            });
        }

        if (cells.length) {
            tick();
            window.setInterval(tick, 1000);
        }
    }

    if (document.readyState === "loading") {
        document.addEventListener("DOMContentLoaded", start);
    } else {
        start();
    }
})();
