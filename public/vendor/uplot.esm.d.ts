// The types of the page's copy of uPlot (public/vendor/uplot.esm.js), from the installed package.
export { default } from "uplot";
