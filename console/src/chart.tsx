/**
 * A uPlot line chart that follows its container's width and takes new data without being rebuilt. uPlot draws on
 * a canvas, which knows no CSS: its text color is read from the theme, and the chart rebuilt when the theme changes.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { clock } from './format.js';

/** Tick spacings of the time axis (s): whole seconds at least, so a young chart reads 22:10:20, never `:14.500`. */
const TIME_STEPS_S = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
/** The time axis spans at least this much, so the first samples do not spread over a few seconds. */
const MIN_SPAN_S = 120;

export interface ChartProps {
  /** Epoch seconds. */
  t: number[];
  series: { label: string; values: number[]; color: string }[];
  height?: number;
}

/** The page's theme attribute, followed as it changes. */
function useThemeName(): string | undefined {
  const [theme, setTheme] = useState(document.documentElement.dataset.theme);
  useEffect(() => {
    const observer = new MutationObserver(() => setTheme(document.documentElement.dataset.theme));
    observer.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme'] });
    return () => observer.disconnect();
  }, []);
  return theme;
}

export function Chart({ t, series, height = 160 }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const theme = useThemeName();
  const plot = useRef<uPlot | null>(null);
  const labels = series.map((s) => s.label).join('\u0000');

  useEffect(() => {
    const el = box.current;
    if (el === null) return;
    const text = getComputedStyle(document.documentElement).getPropertyValue('--muted').trim() || '#888';
    const u = new uPlot(
      {
        width: Math.max(200, el.clientWidth),
        height,
        // Since start, up to the last hour, and at least MIN_SPAN_S.
        scales: {
          x: { time: true, range: (_u, min, max) => [Math.max(Math.min(min, max - MIN_SPAN_S), max - 3600), max] },
        },
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1.5, points: { show: false } }))],
        axes: [
          {
            stroke: text,
            grid: { stroke: 'rgba(128,128,128,0.15)' },
            ticks: { stroke: 'rgba(128,128,128,0.15)' },
            incrs: TIME_STEPS_S,
            // Room for a label with seconds and AM/PM (`10:21:15 PM`) between ticks.
            space: 100,
            values: (_u, splits, _axis, _space, stepS) => splits.map((s) => clock(s, stepS)),
          },
          {
            stroke: text,
            grid: { stroke: 'rgba(128,128,128,0.15)' },
            ticks: { stroke: 'rgba(128,128,128,0.15)' },
            size: 60,
          },
        ],
        legend: { live: false },
        cursor: { drag: { x: false, y: false } },
      },
      [t, ...series.map((s) => s.values)],
      el,
    );
    plot.current = u;
    const resize = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      u.destroy();
      plot.current = null;
    };
    // Rebuilt only when the set of series changes; data changes go through setData below.
  }, [labels, height, theme]);

  useEffect(() => {
    plot.current?.setData([t, ...series.map((s) => s.values)]);
  }, [t, series]);

  return <div class="chart" ref={box} />;
}
