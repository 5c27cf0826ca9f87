/* Count down the TTL of each held lock shown on the page, once a second.
 *
 * Each element with a data-ttl attribute (seconds, as read when the page was built) shows
 * the lease left, in the one format of the server's listing.duration ("4.2s", "5m03s",
 * "2h07m", "3d01h"), and "expired" once the lease has ended. No dependencies; works with
 * several tables per page.
 */
(function () {
    "use strict";

    function pad(number) {
        return String(number).padStart(2, "0");
    }

    function format(seconds) {
        if (seconds < 60) {
            return seconds.toFixed(1) + "s";
        }
        var minutes = Math.floor(seconds / 60);
        if (minutes < 60) {
            return minutes + "m" + pad(Math.floor(seconds) % 60) + "s";
        }
        var hours = Math.floor(minutes / 60);
        if (hours < 24) {
            return hours + "h" + pad(minutes % 60) + "m";
        }
        return Math.floor(hours / 24) + "d" + pad(hours % 24) + "h";
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
                    cell.textContent = format(left);
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
