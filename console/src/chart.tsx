/** A uPlot line chart that follows its container's width and takes new data without being rebuilt. */
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export interface ChartProps {
  /** Epoch seconds. */
  t: number[];
  series: { label: string; values: number[]; color: string }[];
  height?: number;
}

export function Chart({ t, series, height = 160 }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const labels = series.map((s) => s.label).join('\u0000');

  useEffect(() => {
    const el = box.current;
    if (el === null) return;
    const u = new uPlot(
      {
        width: Math.max(200, el.clientWidth),
        height,
        // The last hour, whatever the data holds (one sample is still an hour-wide chart).
        scales: { x: { time: true, range: (_u, _min, max) => [max - 3600, max] } },
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1.5, points: { show: false } }))],
        axes: [
          { stroke: 'currentColor', grid: { stroke: 'rgba(128,128,128,0.15)' } },
          { stroke: 'currentColor', grid: { stroke: 'rgba(128,128,128,0.15)' }, size: 60 },
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
  }, [labels, height]);

  useEffect(() => {
    plot.current?.setData([t, ...series.map((s) => s.values)]);
  }, [t, series]);

  return <div class="chart" ref={box} />;
}
